"""GPU benchmark of skinny_matmul (decode projections, M <= 16) against torch's F.linear and the bandwidth floor.

For each projection of Llama-3-8B and Qwen3-0.6B and each row count (default 1 and 8) it checks every variant
against the float32 reference, then times it: F.linear (cuBLAS), skinny_matmul with its default tiles
(`choose_skinny_tiles`) and a sweep of tile configurations. Two timings, CUDA events both: one replay of a CUDA
graph of 20 back-to-back calls (per call = replay / 20, no launch gaps, as in a captured decode step) and single
eager launches (host launch cost included). Each call in a graph reads its own copy of the weight (up to 1 GiB
of copies) and the L2 is flushed before every timing, so weights come from DRAM as in a decode step. The floor
is the bytes moved (weight, x, out) over the device-to-device copy bandwidth measured in the same run.
Prints the table, the best tiles per shape as TUNED_TILES entries for arbi_kernels/skinny_matmul.py and the
projections' share of one Llama-3-8B decode step; writes JSON.
Usage: python -m benchmarks.skinny_matmul [--rows 1,8] [--output bench-results/skinny_matmul.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import date
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

from arbi_kernels.skinny_matmul import (
    MAX_SPLIT_K,
    PROGRAMS_PER_SM,
    SkinnyTiles,
    choose_skinny_tiles,
    row_bucket,
    skinny_matmul,
)
from benchmarks.kernels import copy_bandwidth_bytes_per_s
from tests.kernels.paged_batches import tolerance
from tests.kernels.reference import skinny_matmul_reference

DTYPE = torch.bfloat16
CALLS_PER_GRAPH = 20
REPEATS = 10
WEIGHT_COPY_BYTES = 2**30  # distinct weight copies per graph, up to CALLS_PER_GRAPH of them
L2_FLUSH_BYTES = 256 * 2**20
LLAMA_LAYERS = 32


@dataclass(frozen=True)
class Projection:
    model: str
    name: str
    k: int  # in_features
    n: int  # out_features


PROJECTIONS = [
    Projection("llama3-8b", "qkv", 4096, 6144),
    Projection("llama3-8b", "o_proj", 4096, 4096),
    Projection("llama3-8b", "gate_up", 4096, 28672),
    Projection("llama3-8b", "down", 14336, 4096),
    Projection("llama3-8b", "lm_head", 4096, 128256),
    Projection("qwen3-0.6b", "qkv", 1024, 4096),
    Projection("qwen3-0.6b", "o_proj", 2048, 1024),
    Projection("qwen3-0.6b", "gate_up", 1024, 6144),
    Projection("qwen3-0.6b", "down", 3072, 1024),
    Projection("qwen3-0.6b", "lm_head", 1024, 151936),
]

# Swept tile shapes per row count; each is tried with every useful split_k (see split_options).
SINGLE_ROW_BASES = [
    SkinnyTiles(block_n=8, block_k=256, num_stages=1),
    SkinnyTiles(block_n=8, block_k=512, num_stages=1),
    SkinnyTiles(block_n=16, block_k=256, num_stages=1),
    SkinnyTiles(block_n=8, block_k=1024, num_stages=1),
    SkinnyTiles(block_n=16, block_k=512, num_stages=1),
    SkinnyTiles(block_n=32, block_k=256, num_stages=1),
    SkinnyTiles(block_n=32, block_k=512, num_warps=8, num_stages=1),
    SkinnyTiles(block_n=16, block_k=256, num_stages=4, use_dot=True),
    SkinnyTiles(block_n=32, block_k=256, num_stages=4, use_dot=True),
]
MULTI_ROW_BASES = [
    SkinnyTiles(block_n=16, block_k=256, num_stages=1),
    SkinnyTiles(block_n=16, block_k=256, num_stages=3, use_dot=True),
    SkinnyTiles(block_n=16, block_k=256, num_stages=4, use_dot=True),
    SkinnyTiles(block_n=32, block_k=128, num_stages=4, use_dot=True),
    SkinnyTiles(block_n=32, block_k=256, num_stages=3, use_dot=True),
    SkinnyTiles(block_n=32, block_k=256, num_stages=4, use_dot=True),
    SkinnyTiles(block_n=64, block_k=128, num_stages=3, use_dot=True),
    SkinnyTiles(block_n=64, block_k=256, num_warps=8, num_stages=3, use_dot=True),
]


@dataclass(frozen=True)
class Variant:
    label: str
    call: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x, weight) -> out
    tiles: SkinnyTiles | None  # None for F.linear


@dataclass(frozen=True)
class Result:
    model: str
    projection: str
    k: int
    n: int
    num_rows: int
    variant: str
    tiles: dict | None
    correct: bool
    error: str
    graph_us_per_call: float
    single_launch_us: float
    floor_us: float
    percent_of_floor: float


def split_options(n: int, k: int, tiles: SkinnyTiles, num_sms: int) -> list[int]:
    """split_k values worth timing: at least 2 K tiles per split and at most 16 programs per SM."""
    row_blocks = triton.cdiv(n, tiles.block_n)
    return [
        split for split in (1, 2, 4, 8, MAX_SPLIT_K)
        if split == 1 or (k // (split * tiles.block_k) >= 2 and row_blocks * split <= 4 * PROGRAMS_PER_SM * num_sms)
    ]


def variants(num_rows: int, n: int, k: int, num_sms: int) -> list[Variant]:
    default = choose_skinny_tiles(num_rows, n, k, DTYPE, torch.device("cuda"))
    found = [
        Variant("F.linear", lambda x, weight: F.linear(x, weight), None),
        Variant(f"default {default.label}", lambda x, weight: skinny_matmul(x, weight, tiles=default), default),
    ]
    for base in SINGLE_ROW_BASES if num_rows == 1 else MULTI_ROW_BASES:
        for split in split_options(n, k, base, num_sms):
            tiles = replace(base, split_k=split)
            found.append(Variant(tiles.label, lambda x, weight, tiles=tiles: skinny_matmul(x, weight, tiles=tiles),
                                 tiles))
    return found


def _median_event_us(run: Callable[[int], object], flush: Callable[[], object]) -> float:
    """Median over REPEATS of the CUDA-event time of run(i), the L2 flushed before each."""
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(REPEATS)]
    for index, (start, end) in enumerate(pairs):
        flush()
        start.record()
        run(index)
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in pairs) * 1e3


def time_in_graph_us(variant: Variant, x: torch.Tensor, weights: list[torch.Tensor],
                     flush: Callable[[], object]) -> float:
    capture_stream = torch.cuda.Stream()
    capture_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(capture_stream):  # cuBLAS sets up its handle and workspace for a stream on first use
        variant.call(x, weights[0])
    torch.cuda.current_stream().wait_stream(capture_stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture_stream):
        for call in range(CALLS_PER_GRAPH):
            variant.call(x, weights[call % len(weights)])
    graph.replay()  # the first replay uploads the graph
    per_replay = _median_event_us(lambda _: graph.replay(), flush)
    return per_replay / CALLS_PER_GRAPH


def time_single_launch_us(variant: Variant, x: torch.Tensor, weights: list[torch.Tensor],
                          flush: Callable[[], object]) -> float:
    return _median_event_us(lambda index: variant.call(x, weights[index % len(weights)]), flush)


def measure(projection: Projection, num_rows: int, variant: Variant, x: torch.Tensor, weights: list[torch.Tensor],
            expected: torch.Tensor, floor_us: float, flush: Callable[[], object]) -> Result:
    """Check, then time; a variant that fails to compile, run or match is recorded, not fatal."""
    error = ""
    try:
        torch.testing.assert_close(variant.call(x, weights[0]), expected, **tolerance(DTYPE))
        graph_us = time_in_graph_us(variant, x, weights, flush)
        single_us = time_single_launch_us(variant, x, weights, flush)
    except Exception as failure:  # a benchmark row, not a crash
        error = f"{type(failure).__name__}: {str(failure).splitlines()[0] if str(failure) else ''}"
        graph_us = single_us = float("nan")
    result = Result(
        model=projection.model, projection=projection.name, k=projection.k, n=projection.n, num_rows=num_rows,
        variant=variant.label, tiles=asdict(variant.tiles) if variant.tiles else None, correct=not error,
        error=error, graph_us_per_call=graph_us, single_launch_us=single_us, floor_us=floor_us,
        percent_of_floor=100 * floor_us / graph_us,
    )
    print(format_row(result) + (f"  <- {error}" if error else ""), flush=True)
    return result


def bench_projection(projection: Projection, rows: list[int], copy_bandwidth: float, num_sms: int,
                     generator: torch.Generator, flush: Callable[[], object]) -> list[Result]:
    weight_bytes = projection.n * projection.k * DTYPE.itemsize
    first = (torch.randn((projection.n, projection.k), generator=generator, device="cuda")
             / projection.k**0.5).to(DTYPE)
    copies = max(1, min(CALLS_PER_GRAPH, WEIGHT_COPY_BYTES // weight_bytes))
    weights = [first] + [first.clone() for _ in range(copies - 1)]
    results = []
    for num_rows in rows:
        x = torch.randn((num_rows, projection.k), generator=generator, device="cuda").to(DTYPE)
        expected = skinny_matmul_reference(x, first)
        moved = weight_bytes + (x.numel() + expected.numel()) * DTYPE.itemsize
        floor_us = moved / copy_bandwidth * 1e6
        for variant in variants(num_rows, projection.n, projection.k, num_sms):
            results.append(measure(projection, num_rows, variant, x, weights, expected, floor_us, flush))
    return results


TABLE_HEADER = (
    "| model | proj | K | N | M | variant | ok | graph us/call | % of floor | single launch us | floor us |\n|"
    + "---|" * 11
)


def format_row(r: Result) -> str:
    return (
        f"| {r.model} | {r.projection} | {r.k} | {r.n} | {r.num_rows} | {r.variant} | {'yes' if r.correct else 'NO'} "
        f"| {r.graph_us_per_call:.1f} | {r.percent_of_floor:.0f} | {r.single_launch_us:.1f} | {r.floor_us:.1f} |"
    )


def best_per_shape(results: list[Result]) -> dict[tuple[str, str, int], dict[str, Result]]:
    """(model, projection, M) -> {'torch', 'default', 'best'}: best is the fastest correct skinny_matmul variant,
    the default tiles included."""
    summary: dict[tuple[str, str, int], dict[str, Result]] = {}
    for r in results:
        entry = summary.setdefault((r.model, r.projection, r.num_rows), {})
        if r.variant == "F.linear":
            entry["torch"] = r
            continue
        if r.variant.startswith("default"):
            entry["default"] = r
        if r.correct and ("best" not in entry or r.graph_us_per_call < entry["best"].graph_us_per_call):
            entry["best"] = r
    return summary


def format_summary(summary: dict[tuple[str, str, int], dict[str, Result]]) -> str:
    header = ("| model | proj | M | floor us | F.linear us | default us | best us | best % floor | best vs F.linear "
              "| best tiles |")
    lines = [header, "|" + "---|" * 10]
    for (model, projection, num_rows), entry in summary.items():
        torch_r, default_r, best_r = entry["torch"], entry["default"], entry.get("best")
        best_us = best_r.graph_us_per_call if best_r else float("nan")
        lines.append(
            f"| {model} | {projection} | {num_rows} | {torch_r.floor_us:.1f} | {torch_r.graph_us_per_call:.1f} | "
            f"{default_r.graph_us_per_call:.1f} | {best_us:.1f} | {100 * torch_r.floor_us / best_us:.0f} | "
            f"{torch_r.graph_us_per_call / best_us:.2f}x | {best_r.variant if best_r else '-'} |"
        )
    return "\n".join(lines)


def llama_step_ms(summary: dict[tuple[str, str, int], dict[str, Result]], num_rows: int) -> dict[str, float]:
    """The projections of one Llama-3-8B decode step (32 layers + lm_head), per variant kind, in ms."""
    totals = {"floor": 0.0, "torch": 0.0, "default": 0.0, "best": 0.0}
    for (model, projection, rows), entry in summary.items():
        if model != "llama3-8b" or rows != num_rows or "best" not in entry:
            continue
        count = 1 if projection == "lm_head" else LLAMA_LAYERS
        totals["floor"] += count * entry["torch"].floor_us / 1e3
        for kind in ("torch", "default", "best"):
            totals[kind] += count * entry[kind].graph_us_per_call / 1e3
    return totals


def tuned_table_source(summary: dict[tuple[str, str, int], dict[str, Result]]) -> str:
    lines = ["TUNED_TILES: dict[tuple[int, int, int], SkinnyTiles] = {"]
    for (model, projection, num_rows), entry in summary.items():
        if "best" in entry:
            best = entry["best"]
            defaults = asdict(SkinnyTiles(block_n=best.tiles["block_n"], block_k=best.tiles["block_k"]))
            fields = ", ".join(f"{name}={value}" for name, value in best.tiles.items()
                               if name in ("block_n", "block_k") or value != defaults[name])
            lines.append(f"    ({row_bucket(num_rows)}, {best.n}, {best.k}): SkinnyTiles({fields}),"
                         f"  # {model} {projection}")
    return "\n".join([*lines, "}"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,8", help="comma-separated row counts M (1..16)")
    parser.add_argument("--output", type=Path, default=Path("bench-results/skinny_matmul.json"))
    arguments = parser.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/skinny_matmul.py needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = [int(value) for value in arguments.rows.split(",")]
    started = time.perf_counter()
    generator = torch.Generator(device="cuda").manual_seed(20261129)
    num_sms = torch.cuda.get_device_properties("cuda").multi_processor_count
    copy_bandwidth = copy_bandwidth_bytes_per_s()
    l2_flush_buffer = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    results: list[Result] = []
    print(TABLE_HEADER, flush=True)
    for projection in PROJECTIONS:
        results += bench_projection(projection, rows, copy_bandwidth, num_sms, generator, l2_flush_buffer.zero_)
        torch.cuda.empty_cache()
        print(f"[{time.perf_counter() - started:.0f} s] {projection.model} {projection.name} done", flush=True)
    summary = best_per_shape(results)
    steps = {num_rows: llama_step_ms(summary, num_rows) for num_rows in rows}
    report = {
        "date": date.today().isoformat(), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": triton.__version__, "num_sms": num_sms, "copy_bandwidth_tb_per_s": copy_bandwidth / 1e12,
        "calls_per_graph": CALLS_PER_GRAPH, "results": [asdict(r) for r in results],
        "best": {f"{model} {projection} M={num_rows}": {kind: asdict(r) for kind, r in entry.items()}
                 for (model, projection, num_rows), entry in summary.items()},
        "llama3_8b_step_projection_ms": {str(num_rows): step for num_rows, step in steps.items()},
        "seconds": time.perf_counter() - started,
    }
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(json.dumps(report, indent=2))
    print(f"\n{report['device']}  torch {torch.__version__}  triton {triton.__version__}  {num_sms} SMs  "
          f"copy {copy_bandwidth / 1e12:.2f} TB/s measured (the floor uses it)")
    print("\n" + format_summary(summary))
    for num_rows, step in steps.items():
        print(f"\nLlama-3-8B projections per decode step, M={num_rows} (32 layers + lm_head, graph timings): "
              + ", ".join(f"{kind} {value:.3f} ms" for kind, value in step.items()))
    print("\n" + tuned_table_source(summary))
    print(f"\nwritten to {arguments.output} in {report['seconds']:.0f} s")
    return 0 if all(r.correct for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
