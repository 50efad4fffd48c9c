"""Benchmark: embeddings/s of the embedding runner at batch 1 / 32 / 256 short sentences, beside
sentence-transformers' `encode` on the same sentences and weights in the same run.

A "batch" is the sentences of one request: batch 1 sends them one request at a time, batch 32 and 256 in
requests of that many (sentence-transformers encodes with `batch_size` equal to it). Both sides tokenize
inside the timing. On the CPU the real all-MiniLM-L6-v2 runs; `--device cuda` writes a random-weight
BERT-base checkpoint (12 layers, 768 wide, MiniLM's tokenizer) that both sides load in fp32.

    python -m benchmarks.embeddings --out bench-results/embeddings.json
    python -m benchmarks.embeddings --device cuda --sentences 4096
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from datetime import date
from pathlib import Path

import torch
from safetensors.torch import save_file

from arbi_grpc.embeddings.embedding_model import EmbeddingInput, EmbeddingModel
from arbi_grpc.embeddings.encoder_runner import EncoderRunner
from arbi_grpc.embeddings.resident import MINILM_NAME, resolve_embedding_spec
from arbi_grpc.models.bert import BertConfig, BertEncoder

BERT_BASE = {"architectures": ["BertModel"], "model_type": "bert", "vocab_size": 30522, "hidden_size": 768,
             "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
             "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0,
             "hidden_act": "gelu"}
SUBJECTS = ["The cat", "A researcher", "My neighbour", "The train", "An old friend", "The committee", "A child"]
ACTIONS = ["walked to the market", "read a long report", "fixed the broken fence", "sang in the rain",
           "missed the last bus", "planted tomatoes", "wrote a short letter", "closed the shop early"]


def sentences(count: int) -> list[str]:
    return [f"{SUBJECTS[i % len(SUBJECTS)]} {ACTIONS[(i // len(SUBJECTS)) % len(ACTIONS)]} on day {i}."
            for i in range(count)]


def random_bert_base_dir(root: Path) -> Path:
    """A BERT-base checkpoint with random weights and MiniLM's tokenizer files."""
    minilm = resolve_embedding_spec(MINILM_NAME)[1]
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(minilm / name, root / name)
    (root / "config.json").write_text(json.dumps(BERT_BASE))
    encoder = BertEncoder.random(BertConfig.from_hf_config(BERT_BASE), torch.float32, "cpu")
    save_file({name: tensor.contiguous() for name, tensor in encoder.weights.items()}, root / "model.safetensors")
    return root


def arbi_embeddings_per_s(runner: EncoderRunner, texts: list[str], batch: int) -> float:
    model = runner.model
    started = time.perf_counter()
    futures = []
    for start in range(0, len(texts), batch):
        token_lists = model.token_lists([EmbeddingInput(text=t) for t in texts[start:start + batch]])
        future = runner.submit(token_lists)
        if batch == 1:
            future.result()  # one request at a time
        futures.append(future)
    for future in futures:
        future.result()
    if torch.cuda.is_available() and model.encoder.device.type == "cuda":
        torch.cuda.synchronize()
    return len(texts) / (time.perf_counter() - started)


def reference_embeddings_per_s(reference, texts: list[str], batch: int) -> float:
    started = time.perf_counter()
    reference.encode(texts, batch_size=batch, convert_to_tensor=True)
    return len(texts) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--sentences", type=int, default=512, help="sentences per measurement")
    parser.add_argument("--batches", default="1,32,256")
    parser.add_argument("--out", type=Path, default=Path("bench-results/embeddings.json"))
    args = parser.parse_args()
    from sentence_transformers import SentenceTransformer, models

    with tempfile.TemporaryDirectory() as scratch:
        if args.device == "cuda":
            model_dir, shape = random_bert_base_dir(Path(scratch)), "random-weight BERT-base fp32"
            transformer = models.Transformer(str(model_dir))
            reference = SentenceTransformer(modules=[transformer, models.Pooling(768, "mean"), models.Normalize()],
                                            device="cuda")
        else:
            model_dir, shape = resolve_embedding_spec(MINILM_NAME)[1], "all-MiniLM-L6-v2 fp32"
            reference = SentenceTransformer(str(model_dir), device="cpu")
        runner = EncoderRunner(EmbeddingModel.load("bench", model_dir, args.device))
        texts = sentences(args.sentences)
        arbi_embeddings_per_s(runner, texts[:64], 32)  # warm-up of both sides
        reference_embeddings_per_s(reference, texts[:64], 32)
        rows = []
        for batch in (int(b) for b in args.batches.split(",")):
            arbi = arbi_embeddings_per_s(runner, texts, batch)
            ref = reference_embeddings_per_s(reference, texts, batch)
            rows.append({"batch": batch, "arbi_per_s": arbi, "sentence_transformers_per_s": ref, "ratio": arbi / ref})
        runner.close()
    print(f"{'batch':>6} {'arbi-serve emb/s':>17} {'sentence-transformers emb/s':>28} {'ratio':>7}")
    for row in rows:
        print(f"{row['batch']:>6} {row['arbi_per_s']:>17.1f} {row['sentence_transformers_per_s']:>28.1f} "
              f"{row['ratio']:>7.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "embeddings", "date": date.today().isoformat(),
                                    "machine": platform.processor() or platform.machine(), "device": args.device,
                                    "model": shape, "sentences": args.sentences, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
