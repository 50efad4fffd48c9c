"""Online serving benchmark: requests of mixed prompt and output lengths arrive over time (Poisson, or all at
once), and the engine serves them with continuous batching and chunked prefill, as it does behind the server.

For each arrival rate and engine loop (overlapped or synchronous steps) it reports output tokens/s, requests/s,
time to first token and time per output token (after the first; p50 and p99). Prefill and mixed steps dominate
such a load, unlike the pure-decode batches of `gpu_decode`. Random bf16 weights of a real model's shape;
prompts are random tokens (the prefix cache has nothing to share). Prints a table and writes JSON:

    python -m benchmarks.gpu_serving --shape llama3-8b --rates 8,32,inf --requests 200
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

import torch

from arbi_grpc.attention.selection import select_attention_backend
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.offline import CompletedRequest, generate
from arbi_grpc.engine.request import GenerationRequest
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.models.reference_shapes import model_config_for_shape
from benchmarks.gpu_decode import requests_for, start_engine


@dataclass(frozen=True)
class Workload:
    """Requests with their own prompt and output lengths, and the seconds after the start each one arrives."""

    requests: list[GenerationRequest]
    arrival_offsets_s: list[float]

    @property
    def num_output_tokens(self) -> int:
        return sum(r.stopping.max_output_tokens for r in self.requests)


@dataclass(frozen=True)
class LoadRow:
    rate_per_s: float
    overlap_steps: bool
    requests: int
    seconds: float
    output_tokens_per_s: float
    requests_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float


def make_workload(count: int, rate_per_s: float, prompt_lens: tuple[int, int], output_lens: tuple[int, int],
                  vocab_size: int, seed: int, tag: str) -> Workload:
    """`count` requests, lengths log-uniform in the given [low, high] ranges (many short, some long, as chat
    traffic is), arriving as a Poisson process of `rate_per_s` (math.inf: all at once)."""
    generator = torch.Generator().manual_seed(seed)

    def log_uniform(low: int, high: int) -> list[int]:
        exponents = torch.rand(count, generator=generator) * (math.log(high) - math.log(low)) + math.log(low)
        return [round(math.exp(e)) for e in exponents.tolist()]

    prompts = [torch.randint(0, vocab_size, (n,), generator=generator).tolist() for n in log_uniform(*prompt_lens)]
    requests = [requests_for([prompt], new_tokens, f"{tag}-{index}")[0]
                for index, (prompt, new_tokens) in enumerate(zip(prompts, log_uniform(*output_lens)))]
    if math.isinf(rate_per_s):
        offsets = [0.0] * count
    else:
        gaps = torch.empty(count).exponential_(rate_per_s, generator=generator)
        offsets = torch.cumsum(gaps, dim=0).sub(gaps[0]).tolist()  # the first request arrives at once
    return Workload(requests, offsets)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summarize(rate_per_s: float, overlap: bool, workload: Workload, done: list[CompletedRequest],
              seconds: float) -> LoadRow:
    ttfts = [r.time_to_first_token_s * 1e3 for r in done]
    tpots = [(r.finished_s - r.first_token_s) * 1e3 / (len(r.token_ids) - 1) for r in done if len(r.token_ids) > 1]
    return LoadRow(
        rate_per_s, overlap, len(done), seconds,
        output_tokens_per_s=workload.num_output_tokens / seconds, requests_per_s=len(done) / seconds,
        ttft_p50_ms=percentile(ttfts, 0.5), ttft_p99_ms=percentile(ttfts, 0.99),
        tpot_p50_ms=percentile(tpots, 0.5), tpot_p99_ms=percentile(tpots, 0.99),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="llama3-8b")
    parser.add_argument("--rates", default="8,32,inf", type=lambda text: [float(r) for r in text.split(",")],
                        help="request arrival rates per second (inf: all at once)")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--prompt-lens", default="32,2048", type=lambda text: tuple(int(n) for n in text.split(",")))
    parser.add_argument("--output-lens", default="16,512", type=lambda text: tuple(int(n) for n in text.split(",")))
    parser.add_argument("--overlap-modes", default="on,off",
                        type=lambda text: [{"on": True, "off": False}[m] for m in text.split(",") if m])
    parser.add_argument("--max-running", type=int, default=128)
    parser.add_argument("--max-step-tokens", type=int, default=2048)
    parser.add_argument("--max-prefill-chunk-tokens", type=int, default=512)
    parser.add_argument("--kv-cache-mib", type=int, default=24576)
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run of a small shape")
    parser.add_argument("--out", type=Path, default=Path("build/gpu_serving.json"))
    args = parser.parse_args()
    config = model_config_for_shape(args.shape)
    cuda = args.device == "cuda"
    engine_config = EngineConfig(
        device=args.device, dtype="bfloat16" if cuda else "float32", kv_cache_memory_mib=args.kv_cache_mib,
        max_model_len=args.prompt_lens[1] + args.output_lens[1], max_running_requests=args.max_running,
        max_step_tokens=args.max_step_tokens, max_prefill_chunk_tokens=args.max_prefill_chunk_tokens,
        enable_prefix_cache=False, cuda_graph_max_batch=args.max_running if cuda else 0,
    )
    model = random_causal_lm(config, torch.bfloat16 if cuda else torch.float32, args.device, seed=0,
                             attention_backend=select_attention_backend(engine_config))
    engine = start_engine(model, config, engine_config)
    rows = []
    try:
        warm = make_workload(4, math.inf, args.prompt_lens, (4, 8), config.vocab_size, seed=1, tag="warm")
        generate(engine, warm.requests)
        for rate in args.rates:
            for overlap in args.overlap_modes:
                engine.set_overlap_steps(overlap).result()
                workload = make_workload(args.requests, rate, args.prompt_lens, args.output_lens, config.vocab_size,
                                         seed=2, tag=f"r{rate}-{overlap}")
                started = time.monotonic()
                done = generate(engine, workload.requests, timeout_s=1800.0,
                                arrival_offsets_s=workload.arrival_offsets_s)
                rows.append(summarize(rate, overlap, workload, done, time.monotonic() - started))
                print(rows[-1], flush=True)
    finally:
        engine.shutdown()
    print(f"\n{args.shape}: {args.requests} requests, prompts {args.prompt_lens[0]}-{args.prompt_lens[1]} tokens, "
          f"outputs {args.output_lens[0]}-{args.output_lens[1]} (log-uniform)")
    print(f"{'rate/s':>6} {'loop':<11} {'out tok/s':>9} {'req/s':>6} {'TTFT p50':>9} {'TTFT p99':>9} "
          f"{'TPOT p50':>9} {'TPOT p99':>9}")
    for row in rows:
        print(f"{row.rate_per_s:>6.0f} {'overlapped' if row.overlap_steps else 'sync':<11} "
              f"{row.output_tokens_per_s:9.0f} {row.requests_per_s:6.1f} {row.ttft_p50_ms:7.0f}ms "
              f"{row.ttft_p99_ms:7.0f}ms {row.tpot_p50_ms:7.1f}ms {row.tpot_p99_ms:7.1f}ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": " ".join(["python -m benchmarks.gpu_serving", *sys.argv[1:]]),
        "date": date.today().isoformat(),
        "machine": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
        "python": platform.python_version(), "torch": torch.__version__, "shape": args.shape,
        "prompt_lens": args.prompt_lens, "output_lens": args.output_lens, "rows": [asdict(row) for row in rows],
    }, indent=2))


if __name__ == "__main__":
    main()
