"""Benchmark: embeddings/s of the embedding runner at batch 1 / 32 / 256 short sentences, beside
sentence-transformers' `encode` on the same sentences, weights and device in the same run, and how closely the
two sides' vectors agree (their lowest cosine over the first sentences).

A "batch" is the sentences of one request: batch 1 sends them one request at a time, batch 32 and 256 in
requests of that many (sentence-transformers encodes with `batch_size` equal to it). Both sides tokenize
inside the timing. `--shape minilm` (the default on the CPU) runs the real all-MiniLM-L6-v2; `bert-base` (the
default on CUDA: 12 layers, 768 wide) and `tiny` (2 layers, 64 wide: a smoke run) write a random-weight
checkpoint of that shape with MiniLM's tokenizer and its sentence-transformers modules (mean pooling,
normalize), which both sides load in fp32 on `--device`.

    python -m benchmarks.embeddings --out bench-results/embeddings.json
    python -m benchmarks.embeddings --device cuda --sentences 4096 --out bench-results/embeddings-cuda.json
    python -m benchmarks.embeddings --device cpu --shape tiny --sentences 64 --out /tmp/embeddings-tiny.json
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
import torch.nn.functional as F
from safetensors.torch import save_file

from arbi_grpc.embeddings.embedding_model import EmbeddingInput, EmbeddingModel
from arbi_grpc.embeddings.encoder_runner import EncoderRunner
from arbi_grpc.embeddings.resident import MINILM_NAME, resolve_embedding_spec
from arbi_grpc.models.bert import BertConfig, BertEncoder

BERT_BASE = {"architectures": ["BertModel"], "model_type": "bert", "vocab_size": 30522, "hidden_size": 768,
             "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
             "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0,
             "hidden_act": "gelu"}
RANDOM_SHAPES = {
    "bert-base": BERT_BASE,
    "tiny": {**BERT_BASE, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 256},
}
MAX_SEQ_LENGTH = 256  # as all-MiniLM-L6-v2 declares
AGREEMENT_SENTENCES = 32
SUBJECTS = ["The cat", "A researcher", "My neighbour", "The train", "An old friend", "The committee", "A child"]
ACTIONS = ["walked to the market", "read a long report", "fixed the broken fence", "sang in the rain",
           "missed the last bus", "planted tomatoes", "wrote a short letter", "closed the shop early"]


def sentences(count: int) -> list[str]:
    return [f"{SUBJECTS[i % len(SUBJECTS)]} {ACTIONS[(i // len(SUBJECTS)) % len(ACTIONS)]} on day {i}."
            for i in range(count)]


MINILM_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json", "modules.json")


def random_bert_dir(root: Path, config: dict, files_dir: Path | None = None) -> Path:
    """A checkpoint of `config`'s shape with random weights, MiniLM's tokenizer files and sentence-transformers
    modules (mean pooling, normalize) that both sides read; those files come from `files_dir` (MINILM_FILES) or,
    by default, from the installed all-MiniLM-L6-v2."""
    source = files_dir or resolve_embedding_spec(MINILM_NAME)[1]
    for name in MINILM_FILES:
        shutil.copy(source / name, root / name)
    (root / "config.json").write_text(json.dumps(config))
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": MAX_SEQ_LENGTH}))
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": config["hidden_size"], "pooling_mode_mean_tokens": True}))
    encoder = BertEncoder.random(BertConfig.from_hf_config(config), torch.float32, "cpu")
    save_file({name: tensor.contiguous() for name, tensor in encoder.weights.items()}, root / "model.safetensors")
    return root


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


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
        future.result()  # on the host: the device work is done
    return len(texts) / (time.perf_counter() - started)


def reference_embeddings_per_s(reference, texts: list[str], batch: int, device: str) -> float:
    started = time.perf_counter()
    reference.encode(texts, batch_size=batch, convert_to_tensor=True)
    synchronize(device)
    return len(texts) / (time.perf_counter() - started)


def lowest_cosine(runner: EncoderRunner, reference, texts: list[str]) -> float:
    """The lowest cosine between the two sides' vectors of `texts` (1.0: the same vectors)."""
    model = runner.model
    ours = runner.submit(model.token_lists([EmbeddingInput(text=t) for t in texts])).result()
    theirs = reference.encode(texts, convert_to_tensor=True).float().cpu()
    return float(F.cosine_similarity(ours, theirs, dim=-1).min())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--shape", choices=["minilm", *RANDOM_SHAPES],
                        help="minilm: the real all-MiniLM-L6-v2; else random weights (default: minilm on cpu, "
                             "bert-base on cuda)")
    parser.add_argument("--sentences", type=int, default=512, help="sentences per measurement")
    parser.add_argument("--batches", default="1,32,256")
    parser.add_argument("--tokenizer-dir", type=Path,
                        help="MiniLM's tokenizer and module files for a random shape (default: the installed model's)")
    parser.add_argument("--out", type=Path, default=Path("bench-results/embeddings.json"))
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")
    shape = args.shape or ("bert-base" if args.device == "cuda" else "minilm")
    from sentence_transformers import SentenceTransformer

    with tempfile.TemporaryDirectory() as scratch:
        if shape == "minilm":
            model_dir, described = resolve_embedding_spec(MINILM_NAME)[1], "all-MiniLM-L6-v2 fp32"
        else:
            model_dir = random_bert_dir(Path(scratch), RANDOM_SHAPES[shape], args.tokenizer_dir)
            described = f"random-weight {shape} fp32"
        reference = SentenceTransformer(str(model_dir), device=args.device)
        runner = EncoderRunner(EmbeddingModel.load("bench", model_dir, args.device))
        texts = sentences(args.sentences)
        agreement = lowest_cosine(runner, reference, texts[:AGREEMENT_SENTENCES])  # also the warm-up of both sides
        rows = []
        for batch in (int(b) for b in args.batches.split(",")):
            arbi = arbi_embeddings_per_s(runner, texts, batch)
            ref = reference_embeddings_per_s(reference, texts, batch, args.device)
            rows.append({"batch": batch, "arbi_per_s": arbi, "sentence_transformers_per_s": ref, "ratio": arbi / ref})
        runner.close()
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or platform.machine()
    print(f"{described} on {args.device} ({device_name}), {args.sentences} sentences; vectors agree to a lowest "
          f"cosine of {agreement:.6f}")
    print(f"{'batch':>6} {'arbi-serve emb/s':>17} {'sentence-transformers emb/s':>28} {'ratio':>7}")
    for row in rows:
        print(f"{row['batch']:>6} {row['arbi_per_s']:>17.1f} {row['sentence_transformers_per_s']:>28.1f} "
              f"{row['ratio']:>7.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "embeddings", "date": date.today().isoformat(),
                                    "machine": device_name, "device": args.device, "model": described,
                                    "sentences": args.sentences, "lowest_cosine": agreement, "rows": rows},
                                   indent=2))


if __name__ == "__main__":
    main()
