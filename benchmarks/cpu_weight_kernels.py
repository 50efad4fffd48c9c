"""CPU benchmark of the int8 weight kernel (`--cpu-weights int8`) against the float32 matmul, on the matmuls of
a model's decode step as `CausalLM.fuse_projections` runs them (q|k|v, o, gate|up, down and the logits
projection), at each batch (default 1 and 16 rows).

Three int8 variants of torch's `_weight_int8pack_mm` on the same per-row int8 weight (`models/int8_weights.py`):
bfloat16 activations (what the model runs, timed with its casts in and out of float32), and float32 and float16
activations (the kernel's other paths). Each time is the best of `--repeats` calls after warm-up (fewer for the
slowest: at least 3, within 2 s), on `--threads` torch threads; prints the table and the layers' matmul total of
one decode step per batch. Then the model itself, loaded with `--cpu-weights float` and `int8`: one decode step
(forward of one token per sequence over a 64-token context in the paged cache, and the logits), best of
`--repeats`, per batch. Writes JSON.
Usage: python -m benchmarks.cpu_weight_kernels [--model SmolLM2-135M-Instruct] [--batches 1,16] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path

import torch
import torch.nn.functional as F

from arbi_grpc.attention.metadata import AttentionMetadata
from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.models.checkpoint_reader import read_hf_config
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.int8_weights import Int8Linear, Int8Weight
from arbi_grpc.models.loader import load_model
from arbi_grpc.models.model_cache import DEFAULT_MODEL, resolve_model

VARIANTS = ("float32", "int8 bf16 (runs)", "int8 fp32 act", "int8 fp16 act")
CONTEXT_TOKENS, BLOCK_SIZE = 64, 16


def matmul_shapes(model: ModelConfig) -> dict[str, tuple[int, int, int]]:
    """{name: (rows N, columns K, how many per step)} of one decode step's matmuls."""
    hidden, query = model.hidden_size, model.num_heads * model.head_dim
    kv, layers = model.num_kv_heads * model.head_dim, model.num_layers
    return {
        "q|k|v": (query + 2 * kv, hidden, layers),
        "o": (hidden, query, layers),
        "gate|up": (2 * model.intermediate_size, hidden, layers),
        "down": (hidden, model.intermediate_size, layers),
        "logits": (model.vocab_size, hidden, 1),
    }


def best_seconds(call: Callable[[], object], repeats: int, budget_s: float = 2.0) -> float:
    """The best of `repeats` calls after warm-up, or of those that fit `budget_s` (at least 3)."""
    for _ in range(3):
        call()
    times: list[float] = []
    while len(times) < repeats and (len(times) < 3 or sum(times) < budget_s):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return min(times)


def time_shape(rows: int, columns: int, batch: int, repeats: int, generator: torch.Generator) -> dict[str, float]:
    """Microseconds per call of each variant for x [batch, columns] @ w [rows, columns].T."""
    weight = torch.randn(rows, columns, generator=generator) * 0.05
    states = torch.randn(batch, columns, generator=generator)
    quantized = Int8Weight.quantize(weight)
    kernel = Int8Linear(quantized, None)
    codes, scale = quantized.codes, quantized.scale
    calls = {
        "float32": lambda: F.linear(states, weight),
        "int8 bf16 (runs)": lambda: kernel(states),
        "int8 fp32 act": lambda: torch.ops.aten._weight_int8pack_mm(states, codes, scale.float()),
        "int8 fp16 act": lambda: torch.ops.aten._weight_int8pack_mm(states.half(), codes, scale.half()),
    }
    with torch.inference_mode():
        return {name: best_seconds(call, repeats) * 1e6 for name, call in calls.items()}


def decode_step_ms(directory: Path, quantize_int8: bool, batches: list[int], repeats: int) -> dict[int, float]:
    """{batch: ms} of one decode step of the loaded model: a token per sequence at position CONTEXT_TOKENS, then
    the logits."""
    model, config = load_model(directory, quantize_int8=quantize_int8)
    blocks = -(-(CONTEXT_TOKENS + 1) // BLOCK_SIZE)
    kv_cache = PagedKVCache.for_model(config, num_blocks=blocks * max(batches), block_size=BLOCK_SIZE,
                                      dtype=torch.float32, device="cpu")
    times = {}
    for batch in batches:
        metadata = AttentionMetadata.build(
            query_lens=[1] * batch, seq_lens=[CONTEXT_TOKENS + 1] * batch,
            block_tables=[list(range(i * blocks, (i + 1) * blocks)) for i in range(batch)], block_size=BLOCK_SIZE)
        tokens, positions = torch.arange(batch), torch.full((batch,), CONTEXT_TOKENS)
        with torch.inference_mode():
            step = lambda: model.compute_logits(model(tokens, positions, metadata, kv_cache))  # noqa: E731
            times[batch] = best_seconds(step, repeats) * 1e3
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model spec whose config.json gives the shapes")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path("bench-results/cpu_weight_kernels.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    directory = resolve_model(args.model).directory
    model = ModelConfig.from_hf_config(read_hf_config(directory))
    generator = torch.Generator().manual_seed(0)
    rows = []
    print(f"| matmul | N x K | batch | {' | '.join(f'{v} us' for v in VARIANTS)} | int8 bf16 / float32 |")
    print(f"|---|---|---|{'---|' * len(VARIANTS)}---|")
    for batch in (int(b) for b in args.batches.split(",")):
        for name, (n, k, count) in matmul_shapes(model).items():
            times = time_shape(n, k, batch, args.repeats, generator)
            rows.append({"matmul": name, "rows": n, "columns": k, "per_step": count, "batch": batch, "us": times})
            cells = " | ".join(f"{times[v]:,.1f}" for v in VARIANTS)
            print(f"| {name} | {n} x {k} | {batch} | {cells} | {times[VARIANTS[1]] / times['float32']:.2f}x |")
    for batch in sorted({row["batch"] for row in rows}):
        step = {v: sum(r["us"][v] * r["per_step"] for r in rows if r["batch"] == batch and r["matmul"] != "logits")
                for v in VARIANTS[:2]}
        print(f"batch {batch}: the layers' matmuls of one decode step {step['float32'] / 1e3:.1f} ms float32, "
              f"{step[VARIANTS[1]] / 1e3:.1f} ms int8 ({step[VARIANTS[1]] / step['float32']:.2f}x)")
    batches = sorted({row["batch"] for row in rows})
    steps = {mode: decode_step_ms(directory, mode == "int8", batches, args.repeats) for mode in ("float", "int8")}
    for batch in batches:
        float_ms, int8_ms = steps["float"][batch], steps["int8"][batch]
        print(f"batch {batch}: one decode step of the model (context {CONTEXT_TOKENS}, logits included) "
              f"{float_ms:.1f} ms float, {int8_ms:.1f} ms int8 ({int8_ms / float_ms:.2f}x)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": date.today().isoformat(), "model": args.model, "threads": args.threads,
                                    "rows": rows, "decode_step_ms": steps}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
