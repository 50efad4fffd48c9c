"""GPU benchmark of the TKV kernels against the bf16 ones: decode attention K4V4 vs bf16 at 8k and 32k context
(batch 1, 8, 32; Llama-3-8B attention: 32 q heads, 8 kv heads, D 128, page 16), plus the whole TKV attention of a
decode step (query transform + kernel + output transform), other bit widths, KV write (decode- and prefill-sized,
with the write's launch shapes) and prefill.

Each row is checked against its torch reference first, then timed as GPU time: GRAPH_LAUNCHES calls, each after
an L2 flush, captured in one CUDA graph and replayed, minus a graph of the flushes alone (so launch overhead,
which dominates single launches at batch 1 and 8, is not in the number; the host cost of one call is the "wall
us/call" column). A call that cannot be captured (a host sync) falls back to triton.testing.do_bench. The TKV
caches are filled by the TKV write kernel from random model-space K/V with random calibration transforms, over
the same block tables as the bf16 caches. --sweep adds TKV decode tile shapes (block_n, warps, pipeline stages,
register prefetch) at 32k context, batch 8 and 32, and split counts at batch 1 and 32. --decode-only times just
the K4V4 decode kernel at 32k context (batch 32, 8 and 1) and 2,300 tokens (batch 64 and 91) against bf16: the
default next to other split counts, the former default (96 registers), the kernel before its register cap, register
prefetch, the folded-scale kernel (tkv_folded_decode.py) and the exact window in one tile, in about a minute.
--prefill-only times bf16 and TKV prefill (both rules of what a chunk reads exact) of 4 x 2,048-token prompts and
of 512-token chunks after 1,536 cached tokens, at several tile shapes. --bound-only times decode of 2,300-token
sequences launched for a 32k bound (a decode graph's max_model_len) against launches sized for them and one split.
Usage: python -m benchmarks.tkv_kernels [--output bench-results/tkv.json]
       [--sweep | --decode-only | --prefill-only | --bound-only]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict
from datetime import date
from pathlib import Path

import torch
import triton.testing

from arbi_kernels.prefill_attention import PrefillTiles
from arbi_kernels.tkv_decode_attention import TkvDecodeTiles
from benchmarks.kernels import (
    COPY_BANDWIDTH_BYTES_PER_S,
    BenchCase,
    BenchResult,
    back_to_back_wall_us,
    copy_bandwidth_bytes_per_s,
    format_row,
    format_table,
)
from benchmarks.tkv_kernel_cases import (
    DEFAULT_DECODE_TILES,
    WRITE_TOKEN_COUNTS,
    bf16_decode_case,
    build,
    llama_tkv,
    prefill_cases,
    tkv_decode_case,
    transform_cases,
    write_cases,
)
from tests.kernels.tkv_reference import tkv_paged_decode_attention_reference

GRAPH_LAUNCHES = 20
GRAPH_REPLAYS = 7
L2_FLUSH_BYTES = 128 * 2**20  # over twice the H200's 50 MiB L2


def graph_gpu_ms(run: Callable[[], object], flush: torch.Tensor) -> float:
    """GPU time of one call of `run` from a cold L2: median over replays of a graph of GRAPH_LAUNCHES (flush,
    call) pairs, less the same graph without the calls, divided by GRAPH_LAUNCHES."""
    run()  # compile and allocate outside the capture
    torch.cuda.synchronize()
    graphs = {}
    for with_calls in (True, False):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(GRAPH_LAUNCHES):
                flush.zero_()
                if with_calls:
                    run()
        graphs[with_calls] = graph
    medians = {}
    for with_calls, graph in graphs.items():
        graph.replay()  # warm
        times = []
        for _ in range(GRAPH_REPLAYS):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        medians[with_calls] = statistics.median(times)
    return (medians[True] - medians[False]) / GRAPH_LAUNCHES


def measure(case: BenchCase, flush: torch.Tensor) -> BenchResult:
    """Check, then time in a CUDA graph (do_bench where the call cannot be captured); a kernel that fails to
    compile or run is recorded as incorrect, not fatal."""
    try:
        case.check()
        correct, error = True, ""
    except Exception as failure:  # noqa: BLE001 (a benchmark row, not a crash: record any failure and go on)
        correct, error = False, f"{type(failure).__name__}: {str(failure).splitlines()[0] if str(failure) else ''}"
    try:
        median_ms = graph_gpu_ms(case.run, flush)
    except Exception:  # noqa: BLE001 (e.g. a host sync inside the call: time it launch by launch instead)
        torch.cuda.synchronize()
        try:
            median_ms = triton.testing.do_bench(case.run, return_mode="median")
        except Exception as failure:  # noqa: BLE001
            correct, error, median_ms = False, error or f"{type(failure).__name__}: {failure}", float("nan")
    floor_ms = case.bytes_moved / COPY_BANDWIDTH_BYTES_PER_S * 1e3
    result = BenchResult(
        kernel=case.kernel, shape=case.shape, correct=correct, error=error, median_ms=median_ms,
        gb_per_s=case.bytes_moved / median_ms / 1e6, floor_ms=floor_ms, percent_of_floor=100 * floor_ms / median_ms,
        tflop_per_s=case.flops / median_ms / 1e9,
        wall_us_per_call=back_to_back_wall_us(case.run) if correct else float("nan"),
    )
    print(format_row(result) + (f"  <- {error}" if error else ""), flush=True)
    return result



def decode_grid(generator: torch.Generator, flush: torch.Tensor) -> tuple[list[BenchResult], list[dict[str, object]]]:
    """K4V4 vs bf16 at 8k and 32k, batch 1/8/32; one bench per shape, freed before the next."""
    results, speedups = [], []
    shape = llama_tkv()
    for context in (8192, 32768):
        for batch_size in (1, 8, 32):
            bench = build(shape, [1] * batch_size, [context] * batch_size, generator)
            bf16, tkv, step = (measure(case, flush) for case in (
                bf16_decode_case(bench), tkv_decode_case(bench, shape), tkv_decode_case(bench, shape,
                                                                                        with_transforms=True)))
            results += [bf16, tkv, step]
            speedups.append({"context": context, "batch": batch_size, "bf16_ms": bf16.median_ms,
                             "tkv_kernel_ms": tkv.median_ms, "tkv_with_transforms_ms": step.median_ms,
                             "kernel_speedup": bf16.median_ms / tkv.median_ms,
                             "speedup_with_transforms": bf16.median_ms / step.median_ms})
            del bench
            torch.cuda.empty_cache()
    return results, speedups


def other_cases(generator: torch.Generator) -> list[BenchCase]:
    bench_bits = [(8, 8), (3, 3), (2, 2), (4, 2)]
    cases = []
    for key_bits, value_bits in bench_bits:
        shape = llama_tkv(key_bits, value_bits)
        cases.append(tkv_decode_case(build(shape, [1] * 8, [32768] * 8, generator), shape))
    cases += transform_cases(32, generator) + transform_cases(8192, generator)
    for num_tokens in WRITE_TOKEN_COUNTS:
        cases += write_cases(num_tokens, llama_tkv(), generator)
    return cases + prefill_only_cases(generator)


PREFILL_CHUNKS = (([2048] * 4, 0), ([512] * 4, 1536))  # four prompts whole, and the last chunks of chunked ones


def prefill_only_cases(generator: torch.Generator, tile_options: tuple[PrefillTiles | None, ...] = (None,)
                       ) -> list[BenchCase]:
    """bf16 and TKV prefill (both rules) of PREFILL_CHUNKS with each of `tile_options`."""
    return [case for query_lens, prefix_len in PREFILL_CHUNKS
            for case in prefill_cases(llama_tkv(), query_lens, generator, tile_options, prefix_len)]


SWEEP_DECODE_TILES = (  # registers per thread on sm_90 (ptxas): 110, 124, 110, 124, 176, 96 + spills, 146,
    # 177, 128 + spills; programs per SM = 65536 / (registers * 32 * warps)
    TkvDecodeTiles(32, 4, 3), TkvDecodeTiles(64, 4, 1), TkvDecodeTiles(64, 8, 3), TkvDecodeTiles(128, 8, 3),
    TkvDecodeTiles(256, 8, 3), TkvDecodeTiles(64, 4, 3, max_registers=96),
    TkvDecodeTiles(32, 4, 1, prefetch=True), TkvDecodeTiles(64, 4, 1, prefetch=True),
    TkvDecodeTiles(32, 4, 1, prefetch=True, max_registers=128),
    TkvDecodeTiles(64, 4, 1, prefetch=True, max_registers=128),
)
SWEEP_TILE_BATCHES = (8, 32)
SWEEP_SPLITS = {1: (32, 64, 128, 256), 32: (2, 4, 8, 16)}


def sweep_cases(generator: torch.Generator) -> list[BenchCase]:
    """K4V4 decode at 32k: tile shapes at batch 8 and 32 (the default is in the main grid), split counts at
    batch 1 and 32; prefill tiles at 4 x 2048."""
    shape = llama_tkv()
    cases = []
    for batch_size in sorted({*SWEEP_TILE_BATCHES, *SWEEP_SPLITS}):
        bench = build(shape, [1] * batch_size, [32768] * batch_size, generator)
        if batch_size in SWEEP_TILE_BATCHES:
            cases += [tkv_decode_case(bench, shape, tiles) for tiles in SWEEP_DECODE_TILES]
        cases += [tkv_decode_case(bench, shape, num_splits=count) for count in SWEEP_SPLITS.get(batch_size, ())]
    prefill_tiles = (PrefillTiles(64, 64, 8), PrefillTiles(128, 64, 8), PrefillTiles(32, 32, 4))
    return cases + prefill_cases(shape, [2048] * 4, generator, prefill_tiles)[1:]


UNCAPPED_DECODE_TILES = dataclasses.replace(DEFAULT_DECODE_TILES, max_registers=None)  # the default before 2026-12-02
FIVE_PER_SM_DECODE_TILES = dataclasses.replace(DEFAULT_DECODE_TILES, max_registers=96)  # the default before 2026-12-04
PREFETCH_DECODE_TILES = dataclasses.replace(DEFAULT_DECODE_TILES, num_stages=1, prefetch=True)
FOLDED_DECODE_TILES = TkvDecodeTiles(64, 4, 2, ptx_nibbles=True, folded_scales=True, max_registers=128)
DECODE_ONLY_VARIANTS: dict[tuple[int, int], tuple[tuple[TkvDecodeTiles, int | None], ...]] = {
    # (batch, context): (tiles, num_splits). auto: choose_tkv_num_splits (at 32k 2 at batch 32, 8 at 8, 64 at 1; at
    # 2,300 tokens 1 at batch 64, 2 at 91); other counts; the former default (96 registers, five programs per SM) at
    # the counts the rule chose for it (5, 10, 82; 1 and 3 at 2,300 tokens)
    (32, 32768): ((DEFAULT_DECODE_TILES, None), (DEFAULT_DECODE_TILES, 4), (FIVE_PER_SM_DECODE_TILES, 5),
                  (UNCAPPED_DECODE_TILES, 4), (PREFETCH_DECODE_TILES, 4), (FOLDED_DECODE_TILES, 4),
                  (dataclasses.replace(DEFAULT_DECODE_TILES, window_blocks=4), None)),
    (8, 32768): ((DEFAULT_DECODE_TILES, None), (DEFAULT_DECODE_TILES, 16), (FIVE_PER_SM_DECODE_TILES, 10),
                 (UNCAPPED_DECODE_TILES, 16), (FOLDED_DECODE_TILES, 16)),
    (1, 32768): ((DEFAULT_DECODE_TILES, None), (DEFAULT_DECODE_TILES, 128), (FIVE_PER_SM_DECODE_TILES, 82),
                 (FOLDED_DECODE_TILES, 64)),
    (64, 2300): ((DEFAULT_DECODE_TILES, None), (DEFAULT_DECODE_TILES, 2), (FIVE_PER_SM_DECODE_TILES, 1)),
    (91, 2300): ((DEFAULT_DECODE_TILES, None), (DEFAULT_DECODE_TILES, 1), (DEFAULT_DECODE_TILES, 4),
                 (FIVE_PER_SM_DECODE_TILES, 3)),
}


def decode_only(generator: torch.Generator, flush: torch.Tensor) -> tuple[list[BenchResult], str]:
    """bf16 and every DECODE_ONLY_VARIANTS row, K4V4: results and a table of each row against bf16 and against the
    first row (the default kernel)."""
    shape = llama_tkv()
    results = []
    lines = ["| batch x context | TKV variant | ms | bf16 / TKV | first row / TKV |", "|" + "---|" * 5]
    for (batch_size, context), variants in DECODE_ONLY_VARIANTS.items():
        bench = build(shape, [1] * batch_size, [context] * batch_size, generator)
        batch = bench.paged
        expected = tkv_paged_decode_attention_reference(batch.query, bench.layer, batch.block_tables, batch.seq_lens,
                                                        *bench.exact_arguments(), batch.softmax_scale)
        bf16 = measure(bf16_decode_case(bench), flush)
        timed = [measure(tkv_decode_case(bench, shape, tiles, splits, expected=expected), flush)
                 for tiles, splits in variants]
        results += [bf16, *timed]
        lines.append(f"| {batch_size} x {context} | bf16 | {bf16.median_ms:.4f} | | |")
        for result in timed:
            variant = result.shape.removeprefix(bench.label).strip()
            lines.append(f"| {batch_size} x {context} | {variant} | {result.median_ms:.4f} | "
                         f"{bf16.median_ms / result.median_ms:.2f} | {timed[0].median_ms / result.median_ms:.2f} |")
        del bench, batch, expected
        torch.cuda.empty_cache()
    return results, "\n".join(lines)


BOUND_BATCHES, BOUND_CONTEXT, BOUND_SEQ_LEN = (1, 8, 32), 2300, 32768


def bound_cases(generator: torch.Generator) -> list[BenchCase]:
    """Decode of BOUND_CONTEXT-token sequences launched as a decode graph captured at a max_model_len of
    BOUND_SEQ_LEN launches it (its split count chosen for the bound), against the launch sized for the sequences and
    against one split (what a launch at the bound did before each sequence was cut by its own length), bf16 and
    K4V4, at each of BOUND_BATCHES."""
    shape = llama_tkv()
    cases = []
    for batch_size in BOUND_BATCHES:
        bench = build(shape, [1] * batch_size, [BOUND_CONTEXT] * batch_size, generator)
        cases += [bf16_decode_case(bench, seq_len_bound=BOUND_SEQ_LEN), bf16_decode_case(bench, num_splits=1),
                  tkv_decode_case(bench, shape, seq_len_bound=BOUND_SEQ_LEN), tkv_decode_case(bench, shape),
                  tkv_decode_case(bench, shape, num_splits=1)]
    return cases


def speedup_table(speedups: list[dict[str, object]]) -> str:
    lines = ["| context | batch | bf16 ms | TKV K4V4 kernel ms | x | TKV with transforms ms | x |", "|" + "---|" * 7]
    for row in speedups:
        lines.append(
            f"| {row['context']} | {row['batch']} | {row['bf16_ms']:.4f} | {row['tkv_kernel_ms']:.4f} | "
            f"{row['kernel_speedup']:.2f} | {row['tkv_with_transforms_ms']:.4f} | {row['speedup_with_transforms']:.2f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("bench-results/tkv.json"))
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--sweep", action="store_true", help="also time TKV decode tiles and split counts at 32k")
    modes.add_argument("--decode-only", action="store_true",
                       help="only the K4V4 decode variants against bf16 (DECODE_ONLY_VARIANTS)")
    modes.add_argument("--prefill-only", action="store_true",
                       help="only bf16 and TKV prefill (PREFILL_CHUNKS), the default tiles and the sweep's")
    modes.add_argument("--bound-only", action="store_true",
                       help="only decode launched for a longer bound than its sequences (bound_cases)")
    arguments = parser.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/tkv_kernels.py needs a CUDA GPU", file=sys.stderr)
        return 2
    generator = torch.Generator(device="cuda").manual_seed(20261129)
    summary: dict[str, object] = {
        "date": date.today().isoformat(), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": triton.__version__, "copy_bandwidth_tb_per_s_measured": copy_bandwidth_bytes_per_s() / 1e12,
    }
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    if arguments.decode_only:
        variants, table = decode_only(generator, flush)
        summary["decode_variants"] = [asdict(r) for r in variants]
        arguments.output.write_text(json.dumps(summary, indent=2))
        print(f"\n{summary['device']}  torch {torch.__version__}  triton {triton.__version__}\n\n{table}")
        print(f"\nwritten to {arguments.output}")
        return 0 if all(r.correct for r in variants) else 1
    if arguments.prefill_only or arguments.bound_only:
        if arguments.prefill_only:
            tiles = (None, PrefillTiles(64, 64, 8), PrefillTiles(128, 64, 8), PrefillTiles(128, 64, 4))
            part, cases = "prefill", prefill_only_cases(generator, tiles)
        else:
            part, cases = "bound", bound_cases(generator)
        results = [measure(case, flush) for case in cases]
        summary[part] = [asdict(r) for r in results]
        arguments.output.write_text(json.dumps(summary, indent=2))
        print(f"\n{summary['device']}  torch {torch.__version__}  triton {triton.__version__}\n")
        print(format_table(results) + f"\n\nwritten to {arguments.output}")
        return 0 if all(r.correct for r in results) else 1
    decode, speedups = decode_grid(generator, flush)
    summary |= {"decode": [asdict(r) for r in decode], "speedups": speedups}
    arguments.output.write_text(json.dumps(summary, indent=2))  # kept even if a later part fails
    others = [measure(case, flush) for case in other_cases(generator)]
    summary["others"] = [asdict(r) for r in others]
    arguments.output.write_text(json.dumps(summary, indent=2))
    sweep = [measure(case, flush) for case in sweep_cases(generator)] if arguments.sweep else []
    summary["sweep"] = [asdict(r) for r in sweep]
    arguments.output.write_text(json.dumps(summary, indent=2))
    print(f"\n{summary['device']}  torch {torch.__version__}  triton {triton.__version__}")
    print("\n" + format_table(decode + others + sweep))
    print("\n" + speedup_table(speedups))
    print(f"\nwritten to {arguments.output}")
    return 0 if all(r.correct for r in decode + others + sweep) else 1


if __name__ == "__main__":
    sys.exit(main())
