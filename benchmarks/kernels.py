"""GPU benchmark for arbi_kernels: checks every kernel against its torch reference at serving shapes, then times
it with triton.testing.do_bench (median, L2 flushed between runs) and compares it with its bandwidth floor.

The floor is the bytes a kernel must move divided by the device-to-device copy bandwidth (4.2 TB/s measured on
an H200; the script also measures it again). Attention prefill is compute-bound, so its TFLOP/s is reported too.
Usage: python -m benchmarks.kernels [--output results.json] [--sweep]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

import torch
import triton.testing

from arbi_kernels import (
    apply_rotary_embedding,
    build_rotary_cache,
    paged_decode_attention,
    paged_prefill_attention,
    rms_norm,
    silu_and_mul,
    write_kv_cache,
)
from arbi_kernels.decode_attention import MIN_TOKENS_PER_SPLIT, DecodeTiles, choose_num_splits
from arbi_kernels.prefill_attention import PrefillTiles, default_prefill_tiles
from tests.kernels import reference
from tests.kernels.paged_batches import BatchShape, PagedBatch, random_paged_batch, tolerance

COPY_BANDWIDTH_BYTES_PER_S = 4.2e12
DTYPE = torch.bfloat16
ELEMENT_BYTES = 2


@dataclass(frozen=True)
class BenchCase:
    """One kernel at one shape: `run` launches it, `check` compares one launch with the reference."""

    kernel: str
    shape: str
    run: Callable[[], object]
    check: Callable[[], None]
    bytes_moved: int
    flops: int = 0


@dataclass(frozen=True)
class BenchResult:
    kernel: str
    shape: str
    correct: bool
    error: str
    median_ms: float
    gb_per_s: float
    floor_ms: float
    percent_of_floor: float
    tflop_per_s: float
    wall_us_per_call: float  # back-to-back calls timed on the host: launch overhead when the kernel is short


def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, **tolerance(actual.dtype))


def _context_bytes(batch: PagedBatch) -> int:
    """K and V of every sequence's whole context: what attention must read at least once."""
    num_kv_heads, head_dim = batch.key_cache.shape[2], batch.key_cache.shape[3]
    return 2 * int(batch.seq_lens.sum()) * num_kv_heads * head_dim * ELEMENT_BYTES


def decode_case(
    shape: BatchShape,
    seq_lens: list[int],
    generator: torch.Generator,
    tiles: DecodeTiles = DecodeTiles(),
    num_splits: int | None = None,
) -> BenchCase:
    batch = random_paged_batch(shape, [1] * len(seq_lens), seq_lens, "cuda", generator)
    arguments = (batch.query, batch.key_cache, batch.value_cache, batch.block_tables, batch.seq_lens,
                 batch.softmax_scale)
    options = {"max_seq_len": max(seq_lens), "num_splits": num_splits, "tiles": tiles}
    sms = torch.cuda.get_device_properties("cuda").multi_processor_count
    splits = num_splits or f"auto({choose_num_splits(len(seq_lens), shape.num_kv_heads, max(seq_lens), sms)})"
    label = (f"B={len(seq_lens)} Hq={shape.num_heads} Hkv={shape.num_kv_heads} D={shape.head_dim} "
             f"page={shape.page_size} ctx<={max(seq_lens)} n={tiles.block_n} w={tiles.num_warps} splits={splits}")
    return BenchCase(
        kernel="decode_attention", shape=label,
        run=lambda: paged_decode_attention(*arguments, **options),
        check=lambda: _close(paged_decode_attention(*arguments, **options),
                             reference.paged_decode_attention_reference(*arguments)),
        bytes_moved=_context_bytes(batch) + 2 * batch.query.numel() * ELEMENT_BYTES,
        flops=4 * int(batch.seq_lens.sum()) * shape.num_heads * shape.head_dim,
    )


def prefill_case(shape: BatchShape, query_lens: list[int], seq_lens: list[int], generator: torch.Generator,
                 tiles: PrefillTiles | None = None) -> BenchCase:
    batch = random_paged_batch(shape, query_lens, seq_lens, "cuda", generator)
    arguments = (batch.query, batch.key_cache, batch.value_cache, batch.block_tables, batch.query_start_loc,
                 batch.seq_lens, batch.softmax_scale)
    options = {"max_query_len": max(query_lens), "tiles": tiles}
    tiles = tiles or default_prefill_tiles(shape.head_dim)
    visible_pairs = sum(q * (s - q) + q * (q + 1) // 2 for q, s in zip(query_lens, seq_lens))
    label = (f"B={len(seq_lens)} new={max(query_lens)} ctx={max(seq_lens)} Hq={shape.num_heads} "
             f"Hkv={shape.num_kv_heads} D={shape.head_dim} m={tiles.block_m} n={tiles.block_n} "
             f"w={tiles.num_warps} s={tiles.num_stages}")
    return BenchCase(
        kernel="prefill_attention", shape=label,
        run=lambda: paged_prefill_attention(*arguments, **options),
        check=lambda: _close(paged_prefill_attention(*arguments, **options),
                             reference.paged_prefill_attention_reference(*arguments)),
        bytes_moved=_context_bytes(batch) + 2 * batch.query.numel() * ELEMENT_BYTES,
        flops=4 * visible_pairs * shape.num_heads * shape.head_dim,
    )


def _noise(size: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    return torch.randn(size, generator=generator, device="cuda").to(DTYPE)


def kv_write_case(num_tokens: int, num_kv_heads: int, head_dim: int, generator: torch.Generator) -> BenchCase:
    page_size, num_blocks = 16, 2 * num_tokens // 16
    caches = [_noise((num_blocks, page_size, num_kv_heads, head_dim), generator) for _ in range(2)]
    key, value = (_noise((num_tokens, num_kv_heads, head_dim), generator) for _ in range(2))
    slots = torch.randperm(num_blocks * page_size, generator=generator, device="cuda")[:num_tokens]

    def check() -> None:
        expected = [cache.clone() for cache in caches]
        write_kv_cache(key, value, *caches, slots)
        reference.write_kv_cache_reference(key, value, *expected, slots)
        _close(caches[0], expected[0])
        _close(caches[1], expected[1])

    return BenchCase(
        kernel="write_kv_cache", shape=f"T={num_tokens} Hkv={num_kv_heads} D={head_dim} page={page_size}",
        run=lambda: write_kv_cache(key, value, *caches, slots), check=check,
        bytes_moved=2 * 2 * key.numel() * ELEMENT_BYTES + slots.numel() * 8,
    )


def rms_norm_case(num_tokens: int, hidden_size: int, generator: torch.Generator) -> BenchCase:
    hidden, residual = _noise((num_tokens, hidden_size), generator), _noise((num_tokens, hidden_size), generator)
    weight = _noise((hidden_size,), generator)

    def check() -> None:
        for actual, expected in zip(rms_norm(hidden, weight, 1e-5, residual),
                                    reference.rms_norm_reference(hidden, weight, 1e-5, residual)):
            _close(actual, expected)

    return BenchCase(
        kernel="rms_norm(+residual)", shape=f"T={num_tokens} H={hidden_size}",
        run=lambda: rms_norm(hidden, weight, 1e-5, residual), check=check,
        bytes_moved=(4 * hidden.numel() + hidden_size) * ELEMENT_BYTES,
    )


def rotary_case(num_tokens: int, num_heads: int, num_kv_heads: int, head_dim: int,
                generator: torch.Generator) -> BenchCase:
    cos, sin = build_rotary_cache(32768, head_dim, 10000.0, "cuda")
    positions = torch.randint(0, 32768, (num_tokens,), generator=generator, device="cuda")
    query = _noise((num_tokens, num_heads, head_dim), generator)
    key = _noise((num_tokens, num_kv_heads, head_dim), generator)

    def check() -> None:
        expected_query, expected_key = query.clone(), key.clone()
        apply_rotary_embedding(positions, query, key, cos, sin)
        reference.rotary_embedding_reference(positions, expected_query, expected_key, cos, sin)
        _close(query, expected_query)
        _close(key, expected_key)

    return BenchCase(
        kernel="rotary_embedding", shape=f"T={num_tokens} Hq={num_heads} Hkv={num_kv_heads} D={head_dim}",
        run=lambda: apply_rotary_embedding(positions, query, key, cos, sin), check=check,
        bytes_moved=2 * (query.numel() + key.numel()) * ELEMENT_BYTES + num_tokens * (head_dim * 4 + 8),
    )


def silu_case(num_tokens: int, intermediate_size: int, generator: torch.Generator) -> BenchCase:
    gate_up = _noise((num_tokens, 2 * intermediate_size), generator)
    return BenchCase(
        kernel="silu_and_mul", shape=f"T={num_tokens} I={intermediate_size}",
        run=lambda: silu_and_mul(gate_up),
        check=lambda: _close(silu_and_mul(gate_up), reference.silu_and_mul_reference(gate_up)),
        bytes_moved=3 * num_tokens * intermediate_size * ELEMENT_BYTES,
    )


def standard_cases(generator: torch.Generator) -> list[BenchCase]:
    smollm = BatchShape(9, 3, 64, 16, DTYPE)
    llama = BatchShape(32, 8, 128, 16, DTYPE)
    ragged = torch.randint(1, 8193, (64,), generator=generator, device="cuda").tolist()
    return [
        decode_case(smollm, [2048] * 64, generator),
        decode_case(llama, [4096] * 32, generator),
        decode_case(BatchShape(32, 8, 128, 32, DTYPE), ragged, generator),
        decode_case(llama, [32768], generator),
        decode_case(BatchShape(32, 32, 128, 16, DTYPE), [4096] * 16, generator),
        prefill_case(smollm, [1024] * 8, [1024] * 8, generator),
        prefill_case(llama, [2048] * 4, [2048] * 4, generator),
        prefill_case(llama, [512] * 8, [4608] * 8, generator),
        kv_write_case(32768, 8, 128, generator),
        rms_norm_case(8192, 576, generator),
        rms_norm_case(8192, 4096, generator),
        rotary_case(16384, 32, 8, 128, generator),
        rotary_case(16384, 9, 3, 64, generator),
        silu_case(8192, 14336, generator),
    ]


def sweep_cases(generator: torch.Generator) -> list[BenchCase]:
    """Decode split counts per shape, the whole grid twice on fresh batches (a repeat shows placement noise)."""
    llama = BatchShape(32, 8, 128, 16, DTYPE)
    ragged = torch.randint(1, 8193, (64,), generator=generator, device="cuda").tolist()
    shapes = [(BatchShape(9, 3, 64, 16, DTYPE), [2048] * 64), (llama, [4096] * 32),
              (BatchShape(32, 8, 128, 32, DTYPE), ragged), (llama, [32768])]
    return [
        decode_case(shape, seq_lens, generator, num_splits=splits)
        for _ in range(2)
        for shape, seq_lens in shapes
        for splits in (1, 2, 4, 8, 16, 32, 64, 128)
        if splits <= -(-max(seq_lens) // MIN_TOKENS_PER_SPLIT)
    ]


def short_context_sweep_cases(generator: torch.Generator) -> list[BenchCase]:
    """Large-batch decode at a 512-token context (the engine benchmark's shape): tiles x split counts."""
    shapes = [BatchShape(32, 8, 128, 16, DTYPE), BatchShape(16, 8, 128, 16, DTYPE)]  # Llama-3-8B, Qwen3-0.6B
    return [
        decode_case(shape, [512] * 128, generator, tiles=DecodeTiles(block_n, num_warps), num_splits=splits)
        for shape in shapes
        for block_n in (16, 32, 64, 128)
        for num_warps in (2, 4, 8)
        for splits in (1, 2, 4)
    ]


def measure(case: BenchCase) -> BenchResult:
    """Check, then time; a kernel that fails to compile or run is recorded as incorrect, not fatal."""
    try:
        case.check()
        correct, error = True, ""
    except Exception as failure:  # a benchmark row, not a crash: record any failure and go on
        correct, error = False, f"{type(failure).__name__}: {str(failure).splitlines()[0] if str(failure) else ''}"
    try:
        median_ms = triton.testing.do_bench(case.run, return_mode="median")
    except Exception as failure:
        correct, error, median_ms = False, error or f"{type(failure).__name__}: {failure}", float("nan")
    floor_ms = case.bytes_moved / COPY_BANDWIDTH_BYTES_PER_S * 1e3
    wall_us = back_to_back_wall_us(case.run) if correct else float("nan")
    result = BenchResult(
        kernel=case.kernel, shape=case.shape, correct=correct, error=error, median_ms=median_ms,
        gb_per_s=case.bytes_moved / median_ms / 1e6, floor_ms=floor_ms, percent_of_floor=100 * floor_ms / median_ms,
        tflop_per_s=case.flops / median_ms / 1e9, wall_us_per_call=wall_us,
    )
    print(format_row(result) + (f"  <- {error}" if error else ""), flush=True)
    return result


def back_to_back_wall_us(run: Callable[[], object], calls: int = 100) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        run()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def copy_bandwidth_bytes_per_s() -> float:
    """Device-to-device copy of 2 GiB, counting bytes read and written."""
    source = torch.empty(2**30, dtype=torch.int16, device="cuda")
    target = torch.empty_like(source)
    median_ms = triton.testing.do_bench(lambda: target.copy_(source), return_mode="median")
    return 2 * source.numel() * source.element_size() / median_ms * 1e3


TABLE_HEADER = (
    "| kernel | shape | ok | median ms | GB/s | floor ms | % of floor | TFLOP/s | wall us/call |\n|" + "---|" * 9
)


def format_row(r: BenchResult) -> str:
    return (
        f"| {r.kernel} | {r.shape} | {'yes' if r.correct else 'NO'} | {r.median_ms:.4f} | {r.gb_per_s:.0f} | "
        f"{r.floor_ms:.4f} | {r.percent_of_floor:.0f} | {r.tflop_per_s:.1f} | {r.wall_us_per_call:.0f} |"
    )


def format_table(results: list[BenchResult]) -> str:
    return "\n".join([TABLE_HEADER, *(format_row(r) for r in results)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("bench-results/kernels.json"))
    parser.add_argument("--sweep", action="store_true", help="also time decode split counts, twice each")
    parser.add_argument("--short-context-sweep", action="store_true",
                        help="only time decode tiles and split counts at batch 128, 512-token contexts")
    arguments = parser.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/kernels.py needs a CUDA GPU", file=sys.stderr)
        return 2
    generator = torch.Generator(device="cuda").manual_seed(20261129)
    copy_bandwidth = copy_bandwidth_bytes_per_s()
    summary = {
        "date": date.today().isoformat(), "device": torch.cuda.get_device_name(),
        "torch": torch.__version__, "triton": triton.__version__,
        "copy_bandwidth_tb_per_s_measured": copy_bandwidth / 1e12,
        "floor_bandwidth_tb_per_s": COPY_BANDWIDTH_BYTES_PER_S / 1e12,
    }
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    cases = short_context_sweep_cases(generator) if arguments.short_context_sweep else standard_cases(generator)
    results = [measure(case) for case in cases]
    summary["results"] = [asdict(r) for r in results]
    arguments.output.write_text(json.dumps(summary, indent=2))  # kept even if the sweep is cut short
    sweep = [measure(case) for case in sweep_cases(generator)] if arguments.sweep else []
    summary["sweep"] = [asdict(r) for r in sweep]
    arguments.output.write_text(json.dumps(summary, indent=2))
    print(f"{summary['device']}  torch {torch.__version__}  triton {triton.__version__}  "
          f"copy {copy_bandwidth / 1e12:.2f} TB/s measured (floor uses {COPY_BANDWIDTH_BYTES_PER_S / 1e12} TB/s)")
    if sweep:
        print("\nsweep\n" + format_table(sweep))
    print("\n" + format_table(results))
    print(f"\nwritten to {arguments.output}")
    return 0 if all(r.correct for r in results + sweep) else 1


if __name__ == "__main__":
    sys.exit(main())
