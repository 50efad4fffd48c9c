"""CPU benchmark of the quantized weight kernels (`--cpu-weights int4` and `int8`) against the float32 matmul, on
the matmuls of a model's decode step as `CausalLM.fuse_projections` runs them (q|k|v, o, gate|up, down and the
logits projection), at each batch (default 1 and 16 rows).

Candidates, on the same random weight of each shape: the float32 matmul; `BlockLinear` on Q4_1 blocks (Q8_0 for
the logits, as GGUF imports store the table; what `int4` runs); `Int8DotLinear` on the same blocks (activations
quantized to int8 per 32 columns, the blocks multiplied in integers: not exact); torch's
`_weight_int4pack_mm_for_cpu` on the same codes (bfloat16 activations, scales and outputs; Q8_0 as two int4 halves;
what `int4` ran before); torch's `_weight_int8pack_mm` on per-row int8 codes with bfloat16 activations (what `int8`
runs); and fbgemm's dynamic int8 linear (`quantized::linear_dynamic`, activations quantized per call: not exact,
shown for speed only). Each variant holds one copy of the weight per layer (one for the logits) and is called on
them in turn, so the weights come from memory as in a step; the variants take turns within each round, and the
time is the best of `--repeats` rounds after warm-up, per call, on `--threads` torch threads. Then the model
itself, loaded with `--cpu-weights float`, `int8` and `int4`: one decode step (forward of one token per sequence
over a 64-token context in the paged cache, and the logits), best of `--repeats`, per batch, the modes in turn
within each round. Prints the tables; writes JSON.
Usage: python -m benchmarks.cpu_weight_kernels [--model SmolLM2-135M-Instruct] [--batches 1,16] [--threads 1]
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from arbi_grpc.attention.metadata import AttentionMetadata
from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.models.checkpoint_reader import read_hf_config
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.block_linear import BlockLinear
from arbi_grpc.models.block_linear_int8_dot import Int8DotLinear
from arbi_grpc.models.int8_weights import Int8Linear, Int8Weight
from arbi_grpc.models.loader import load_model
from arbi_grpc.models.model_cache import DEFAULT_MODEL, resolve_model
from arbi_grpc.models.quantized_weights import GROUP_SIZE, QuantizedWeight

VARIANTS = ("float32", "int4 BlockLinear (runs)", "int8-dot BlockLinear blocks", "int4 torch int4pack",
            "int8 torch int8pack (runs)", "fbgemm dynamic int8")
MODES = ("float", "int8", "int4")
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


def best_seconds(calls: dict[str, Callable[[], object]], repeats: int, budget_s: float = 2.0) -> dict[str, float]:
    """{name: seconds}, the best of `repeats` rounds after warm-up, or of the rounds that fit `budget_s` per call
    (at least 3); each round calls every entry once in turn, so load changes on a shared machine reach them alike."""
    for call in calls.values():
        for _ in range(3):
            call()
    best = dict.fromkeys(calls, float("inf"))
    rounds, spent = 0, 0.0
    while rounds < repeats and (rounds < 3 or spent < budget_s * len(calls)):
        for name, call in calls.items():
            started = time.perf_counter()
            call()
            elapsed = time.perf_counter() - started
            best[name], spent = min(best[name], elapsed), spent + elapsed
        rounds += 1
    return best


def random_blocks(kind: str, rows: int, columns: int, generator: torch.Generator) -> QuantizedWeight:
    """A random Q4_1 ("q4") or Q8_0 ("q8") weight in its stored form."""
    groups = columns // GROUP_SIZE
    scale = (torch.rand(rows, groups, generator=generator) * 0.01 + 1e-3).half().float()
    if kind == "q8":
        return QuantizedWeight("q8", torch.randint(-128, 128, (rows, columns), generator=generator,
                                                   dtype=torch.int8), scale, None)
    codes = torch.randint(0, 256, (rows, columns // 2), generator=generator, dtype=torch.uint8)
    return QuantizedWeight("q4", codes, scale, (torch.randn(rows, groups, generator=generator) * 0.01).half().float())


def int4pack_call(weight: QuantizedWeight) -> Callable[[Tensor], Tensor]:
    """torch's int4 kernel on `weight`'s codes (w = (q - 8) scale + zero per group; Q8_0 as two int4 halves)."""
    integers = weight.integer_codes()
    if weight.kind == "q8":
        unsigned = integers + 128
        integers = torch.cat((unsigned >> 4, unsigned & 0x0F), dim=1)
        scales = torch.cat((16 * weight.scale, weight.scale), dim=1)
        zeros = torch.cat((torch.zeros_like(weight.scale), 8 * weight.scale), dim=1)
    else:
        scales, zeros = weight.scale, weight.minimum + 8 * weight.scale
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(integers, 2)
    scales_and_zeros = torch.stack((scales.t(), zeros.t()), dim=-1).to(torch.bfloat16).contiguous()
    repeats = 2 if weight.kind == "q8" else 1

    def call(states: Tensor) -> Tensor:
        inputs = states.to(torch.bfloat16).repeat(1, repeats)
        return torch.ops.aten._weight_int4pack_mm_for_cpu(inputs, packed, GROUP_SIZE, scales_and_zeros).float()
    return call


def fbgemm_call(weight: Tensor) -> Callable[[Tensor], Tensor]:
    """fbgemm's dynamic int8 linear (per-row int8 weight, activations quantized per call)."""
    scale = (weight.abs().amax(dim=1).double() / 127).clamp_min(1e-12)
    codes = torch.quantize_per_channel(weight, scale, torch.zeros_like(scale, dtype=torch.long), 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(codes, None)
    return lambda states: torch.ops.quantized.linear_dynamic(states, packed, True)


def variant_calls(name: str, rows: int, columns: int, generator: torch.Generator) -> dict[str, Callable]:
    """{variant: x -> x @ w.T} for one random weight of the shape (the logits' as Q8_0, the layers' as Q4_1)."""
    blocks = random_blocks("q8" if name == "logits" else "q4", rows, columns, generator)
    dense = blocks.dequantize()
    block_linear = BlockLinear(blocks, None)
    return {
        "float32": lambda states: F.linear(states, dense),
        "int4 BlockLinear (runs)": block_linear,
        "int8-dot BlockLinear blocks": Int8DotLinear(block_linear),
        "int4 torch int4pack": int4pack_call(blocks),
        "int8 torch int8pack (runs)": Int8Linear(Int8Weight.quantize(dense), None),
        "fbgemm dynamic int8": fbgemm_call(dense),
    }


def time_shape(name: str, rows: int, columns: int, batch: int, copies: int, repeats: int,
               generator: torch.Generator) -> dict[str, float]:
    """Microseconds per call of each variant for x [batch, columns] @ w [rows, columns].T, over `copies` weights."""
    layers = [variant_calls(name, rows, columns, generator) for _ in range(copies)]
    states = torch.randn(batch, columns, generator=generator)
    rounds = {variant: functools.partial(call_each, [layer[variant] for layer in layers], states)
              for variant in VARIANTS}
    with torch.inference_mode():
        best = best_seconds(rounds, repeats)
    return {variant: seconds / copies * 1e6 for variant, seconds in best.items()}


def call_each(calls: list[Callable[[Tensor], Tensor]], states: Tensor) -> None:
    for call in calls:
        call(states)


def decode_steps_ms(directory: Path, batches: list[int], repeats: int) -> dict[str, dict[int, float]]:
    """{mode: {batch: ms}} of one decode step of the model loaded in each of MODES: a token per sequence at
    position CONTEXT_TOKENS, then the logits; the modes take turns within each round, so load changes on a
    shared machine reach them alike."""
    models = {mode: load_model(directory, quantize_int8=mode == "int8", keep_quantized=mode == "int4")
              for mode in MODES}
    config = models["float"][1]
    blocks = -(-(CONTEXT_TOKENS + 1) // BLOCK_SIZE)
    kv_cache = PagedKVCache.for_model(config, num_blocks=blocks * max(batches), block_size=BLOCK_SIZE,
                                      dtype=torch.float32, device="cpu")
    times: dict[str, dict[int, float]] = {mode: {} for mode in MODES}
    for batch in batches:
        metadata = AttentionMetadata.build(
            query_lens=[1] * batch, seq_lens=[CONTEXT_TOKENS + 1] * batch,
            block_tables=[list(range(i * blocks, (i + 1) * blocks)) for i in range(batch)], block_size=BLOCK_SIZE)
        tokens, positions = torch.arange(batch), torch.full((batch,), CONTEXT_TOKENS)
        best = {mode: float("inf") for mode in MODES}
        with torch.inference_mode():
            for _ in range(repeats):
                for mode, (model, _) in models.items():
                    started = time.perf_counter()
                    model.compute_logits(model(tokens, positions, metadata, kv_cache))
                    best[mode] = min(best[mode], time.perf_counter() - started)
        for mode in MODES:
            times[mode][batch] = best[mode] * 1e3
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
    base = VARIANTS[0]
    print(f"| matmul | N x K | batch | {' | '.join(f'{v} us' for v in VARIANTS)} | int4 BlockLinear / float32 |")
    print(f"|---|---|---|{'---|' * len(VARIANTS)}---|")
    for batch in (int(b) for b in args.batches.split(",")):
        for name, (n, k, count) in matmul_shapes(model).items():
            times = time_shape(name, n, k, batch, count, args.repeats, generator)
            rows.append({"matmul": name, "rows": n, "columns": k, "per_step": count, "batch": batch, "us": times})
            cells = " | ".join(f"{times[v]:,.1f}" for v in VARIANTS)
            print(f"| {name} | {n} x {k} | {batch} | {cells} | {times[VARIANTS[1]] / times[base]:.2f}x |")
    for batch in sorted({row["batch"] for row in rows}):
        step = {v: sum(r["us"][v] * r["per_step"] for r in rows if r["batch"] == batch) for v in VARIANTS}
        cells = ", ".join(f"{v} {step[v] / 1e3:.1f} ms" for v in VARIANTS)
        print(f"batch {batch}: the matmuls of one decode step (layers and logits): {cells}")
    batches = sorted({row["batch"] for row in rows})
    steps = decode_steps_ms(directory, batches, args.repeats)
    for batch in batches:
        cells = ", ".join(f"{mode} {steps[mode][batch]:.1f} ms" for mode in MODES)
        print(f"batch {batch}: one decode step of the model (context {CONTEXT_TOKENS}, logits included): {cells}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": date.today().isoformat(), "model": args.model, "threads": args.threads,
                                    "rows": rows, "decode_step_ms": steps}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
