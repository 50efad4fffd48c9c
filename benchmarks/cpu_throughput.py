"""Benchmark: output tokens/s of SmolLM2 on the CPU through gRPC at several concurrencies, beside
HF transformers `generate()` on the same prompts in the same run.

Every request generates exactly `--output-tokens` tokens (ignore_eos) under greedy decoding, so both
sides do the same work. HF runs each concurrency level as one left-padded batch.

    python -m benchmarks.cpu_throughput --out bench-results/cpu_throughput.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

import grpc
import torch

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as pb_grpc
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from arbi_grpc.config import EngineConfig
from arbi_grpc.models.model_cache import DEFAULT_MODEL, resolve_model
from arbi_grpc.served_model import build_served_model
from arbi_grpc.server import GrpcServer

TOPICS = ["the ocean", "a city at night", "mountains", "a library", "the first snow", "trains",
          "a garden", "the moon", "coffee", "a thunderstorm", "old maps", "robots"]


def prompts(count: int) -> list[str]:
    return [f"Write a short paragraph about {TOPICS[i % len(TOPICS)]} (variation {i})." for i in range(count)]


def arbi_tokens_per_s(target: str, questions: list[str], output_tokens: int) -> float:
    channel = grpc.insecure_channel(target)
    stub = pb_grpc.GenerateServiceStub(channel)

    def one(question: str) -> int:
        request = pb.GenerateRequest(
            chat=types_pb.ChatInput(messages=[types_pb.ChatMessage(role="user", content=question)]),
            sampling=types_pb.SamplingParameters(temperature=0.0),
            stopping=types_pb.StoppingCriteria(max_output_tokens=output_tokens, ignore_eos=True),
        )
        return sum(len(r.tokens) for r in stub.Generate(request))

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(questions)) as pool:
        produced = sum(pool.map(one, questions))
    elapsed = time.perf_counter() - started
    channel.close()
    return produced / elapsed


def hf_tokens_per_s(model_dir: Path, questions: list[str], output_tokens: int) -> float:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                           add_generation_prompt=True) for q in questions]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    started = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(**batch, max_new_tokens=output_tokens, min_new_tokens=output_tokens,
                             do_sample=False, pad_token_id=tokenizer.pad_token_id or 0)
    elapsed = time.perf_counter() - started
    produced = (out.shape[1] - batch["input_ids"].shape[1]) * len(questions)
    return produced / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("bench-results/cpu_throughput.json"))
    args = parser.parse_args()

    model_dir = resolve_model(DEFAULT_MODEL).directory
    server = GrpcServer(build_served_model(EngineConfig(model=str(model_dir)))).start()
    arbi_tokens_per_s(server.target, prompts(2), 4)  # warm-up
    rows = []
    try:
        for concurrency in args.concurrency:
            questions = prompts(concurrency)
            arbi = arbi_tokens_per_s(server.target, questions, args.output_tokens)
            hf = hf_tokens_per_s(model_dir, questions, args.output_tokens)
            rows.append({"concurrency": concurrency, "arbi_tok_s": arbi, "hf_tok_s": hf, "ratio": arbi / hf})
    finally:
        server.stop()
    print(f"{'streams':>8} {'arbi-serve tok/s':>17} {'HF generate tok/s':>18} {'ratio':>7}")
    for row in rows:
        print(f"{row['concurrency']:>8} {row['arbi_tok_s']:>17.1f} {row['hf_tok_s']:>18.1f} {row['ratio']:>7.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "cpu_throughput", "date": date.today().isoformat(), "machine": platform.processor()
        or platform.machine(), "torch_threads": torch.get_num_threads(),
        "output_tokens": args.output_tokens, "rows": rows,
    }, indent=2))


if __name__ == "__main__":
    main()
