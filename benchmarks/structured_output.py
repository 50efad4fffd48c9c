"""Benchmark: the cost of output constraints, SmolLM2 in the real engine, one run.

Per-step time: `--batches` requests (greedy) each decode `--new-tokens` tokens, once unconstrained
(ignore_eos) and once with a JSON-schema constraint per row (row i: an array of at least 64 items of case
schema i mod 43 of `tests/data/structured_output/cases.json`, so the grammar cannot end inside the window and
every row does real JSON-schema mask work). The engine thread's `step` is timed; a round's figure is the mean
wall time of the steps where the whole batch decodes (all rows running, none waiting). The arms alternate for
`--rounds` rounds and each reports its best round (the least disturbed by other load), constrained against not,
in wall time and in the process's CPU time (all its threads; less sensitive to other processes on a shared
machine). `--half` adds an arm where only the even rows are constrained (the odd ones decode unconstrained in the
same batch).
The constrained arm runs after its grammars are compiled and cached, so it measures the masks, not compiles.

Breakdown (`engine.step_timings`, the decode steps of the whole batch): host ms filling the masks and queueing the sampling, and on CUDA
the device's forward pass, its wait for the sampling to be queued, and the sampling. The masks are hidden when the
constrained arm's device wait stays at the plain arm's and the queueing stays short (a queueing that lasts about a
forward pass means a host wait for the device).

Fill cost: each case schema (as the constrained arm wraps it) walked 32 tokens by a matcher that accepts a seeded
random allowed token each time: microseconds per row fill, per schema median then p50/p99/max over the schemas;
then, per batch size, one fill of that many rows one matcher at a time against xgrammar's batch fill
(`BatchGrammarMatcher`, its default threads), best of 20.

Compile time: every case schema compiled by the engine's `ConstraintCompiler` with an empty in-memory cache
(first), then again (cached), p50 and p99 over the set.

    python -m benchmarks.structured_output --out bench-results/structured_output.json
    python -m benchmarks.structured_output --device cuda --batches 1,32,128

`--model` serves another model (a name or directory, as `serve --model`): on a GPU machine without the embedded
GGUF, a directory of random weights of SmolLM2's shape with its tokenizer (benchmarks.serving.write_model_dir)
measures the same masks, over other tokens.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import threading
import time
from dataclasses import replace
from datetime import date
from pathlib import Path

import numpy as np
import torch
import xgrammar as xgr

from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.grammar.compile_cache import CompileCache
from arbi_grpc.engine.grammar.compiler import ConstraintCompiler
from arbi_grpc.engine.input_processor import TextPrompt
from arbi_grpc.engine.output_constraint import ConstraintKind, OutputConstraint
from arbi_grpc.engine.request import SchedulingParams
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.engine.step_timings import StepTiming, StepTimings
from arbi_grpc.models.model_cache import DEFAULT_MODEL, resolve_model
from arbi_grpc.served_model import ServedModel, build_served_model
from tests.structured_cases import raw_cases

PROMPT = "List some examples as a JSON array:"


class StepClock:
    """Wraps the engine's `step` (the engine thread calls it through the instance) and records each step's
    wall and process CPU seconds with the batch it ran: (wall, cpu, running, waiting)."""

    def __init__(self, served: ServedModel) -> None:
        self.steps: list[tuple[float, float, int, int]] = []
        engine, step = served.engine, served.engine.step

        def timed() -> None:
            started, started_cpu = time.perf_counter(), time.process_time()
            step()
            stats = engine.stats()
            self.steps.append((time.perf_counter() - started, time.process_time() - started_cpu, stats.num_running,
                               stats.num_waiting))

        engine.step = timed


BREAKDOWN = ("fill_ms", "queue_ms", "device_forward_ms", "device_wait_ms", "device_sampling_ms")


def breakdown(timings: list[StepTiming], batch: int) -> dict[str, float | None]:
    """Mean figures of the decode steps of the whole batch (device figures None off CUDA)."""
    whole = [timing for timing in timings if timing.rows == timing.num_tokens == batch]
    device = [timing.device_ms() for timing in whole]
    figures: dict[str, float | None] = {
        "fill_ms": 1e3 * statistics.fmean(timing.fill_s for timing in whole),
        "queue_ms": 1e3 * statistics.fmean(timing.queue_s for timing in whole),
    }
    for index, name in enumerate(BREAKDOWN[2:]):
        figures[name] = None if None in device else statistics.fmean(entry[index] for entry in device)
    return figures


def fill_costs(served: ServedModel, batches: list[int], walk: int = 32) -> dict:
    """Per-row fill microseconds of every case schema along a random walk, and one-at-a-time against batch fill."""
    compiler = served.inputs.grammars
    compiled = [compiler.compile(_constraint(index)).result() for index in range(len(raw_cases()["schemas"]))]
    vocab_size, stops = compiler.vocabulary.vocab_size, set(compiler.vocabulary.stop_token_ids)
    chooser = random.Random(0)
    bitmask = xgr.allocate_token_bitmask(1, vocab_size)

    def step(matcher: xgr.GrammarMatcher) -> float:
        started = time.perf_counter()
        matcher.fill_next_token_bitmask(bitmask, 0)
        seconds = time.perf_counter() - started
        allowed = np.flatnonzero(np.unpackbits(bitmask[0].numpy().view(np.uint8), bitorder="little")[:vocab_size])
        allowed = [token for token in allowed.tolist() if token not in stops]
        if not matcher.accept_token(chooser.choice(allowed)):
            raise RuntimeError("a matcher refused a token its own mask allowed")
        return seconds

    per_schema = []
    for grammar in compiled:
        matcher = xgr.GrammarMatcher(grammar)
        per_schema.append(1e6 * statistics.median(step(matcher) for _ in range(walk)))
    batch_fill = xgr.BatchGrammarMatcher()
    batched: dict[str, dict[str, float]] = {}
    for batch in batches:
        matchers = [xgr.GrammarMatcher(compiled[row % len(compiled)]) for row in range(batch)]
        for row, matcher in enumerate(matchers):
            for _ in range(row % walk):
                step(matcher)
        rows = xgr.allocate_token_bitmask(batch, vocab_size)
        one_by_one, together = float("inf"), float("inf")
        for _ in range(20):
            started = time.perf_counter()
            for row, matcher in enumerate(matchers):
                matcher.fill_next_token_bitmask(rows, row)
            one_by_one = min(one_by_one, time.perf_counter() - started)
            started = time.perf_counter()
            batch_fill.batch_fill_next_token_bitmask(matchers, rows)
            together = min(together, time.perf_counter() - started)
        batched[str(batch)] = {"one_at_a_time_ms": 1e3 * one_by_one, "batch_fill_ms": 1e3 * together}
    return {"per_row_us": {"p50": _percentile(per_schema, 0.5), "p99": _percentile(per_schema, 0.99),
                           "max": max(per_schema)}, "batch": batched}


def _constraint(index: int) -> OutputConstraint:
    schemas = raw_cases()["schemas"]
    item = dict(schemas[index % len(schemas)]["schema"])
    definitions = item.pop("$defs", None)  # `#/$defs/...` references resolve from the root
    array = {"type": "array", "minItems": 64, "items": item, **({"$defs": definitions} if definitions else {})}
    return OutputConstraint(ConstraintKind.JSON_SCHEMA, json.dumps(array))


def _constrains(arm: str, index: int) -> bool:
    """Whether row `index` of a batch of `arm` ("plain", "constrained" or "half") has a constraint."""
    return arm == "constrained" or (arm == "half" and index % 2 == 0)


def run_batch(served: ServedModel, clock: StepClock, batch: int, new_tokens: int, arm: str,
              tag: str) -> list[tuple[float, float]]:
    """Runs one batch to its end; (wall, cpu) seconds of each step where the whole batch decoded."""
    done = threading.Semaphore(0)
    errors: list[object] = []

    def sink(output) -> None:
        if output.error is not None:
            errors.append(output.error)
        if output.finished:
            done.release()

    first = len(clock.steps)
    for index in range(batch):
        constrained = _constrains(arm, index)
        sampling = SamplingParams(temperature=0.0)
        if constrained:
            sampling = replace(sampling, output_constraint=_constraint(index))
        generation = served.inputs.build(f"{tag}-{index}", TextPrompt(f"{PROMPT} ({index})"), sampling,
                                         StoppingParams(max_output_tokens=new_tokens, ignore_eos=not constrained),
                                         SchedulingParams())
        served.engine.submit(generation, sink)
    for _ in range(batch):
        done.acquire()
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed, the first: {errors[0]}")
    return [(wall, cpu) for wall, cpu, running, waiting in clock.steps[first:] if running == batch and not waiting]


def compile_times(served: ServedModel) -> dict[str, list[float]]:
    """Seconds to compile each case schema with an empty cache, then cached."""
    vocabulary = served.inputs.grammars.vocabulary
    compiler = ConstraintCompiler(vocabulary, CompileCache(vocabulary.info, None), timeout_ms=600_000)
    constraints = [OutputConstraint(ConstraintKind.JSON_SCHEMA, json.dumps(entry["schema"]), strict=True)
                   for entry in raw_cases()["schemas"]]
    times: dict[str, list[float]] = {"first": [], "cached": []}
    try:
        for arm in times:
            for constraint in constraints:
                started = time.perf_counter()
                compiler.compile(constraint).result()
                times[arm].append(time.perf_counter() - started)
    finally:
        compiler.close()
    return times


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,32,128")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="the model served (default: the embedded SmolLM2)")
    parser.add_argument("--kv-cache-mib", type=int, default=512)
    parser.add_argument("--half", action="store_true", help="also an arm with every other row constrained")
    parser.add_argument("--out", type=Path, default=Path("bench-results/structured_output.json"))
    args = parser.parse_args()
    batches = [int(batch) for batch in args.batches.split(",")]
    arms = ("plain", "constrained", "half") if args.half else ("plain", "constrained")
    config = EngineConfig(model=str(resolve_model(args.model).directory), device=args.device,
                          kv_cache_memory_mib=args.kv_cache_mib, max_running_requests=max(batches))
    served = build_served_model(config)
    try:
        compiles = compile_times(served)
        clock = StepClock(served)
        for batch in batches:  # every row's grammar compiled and cached, the mask kernel compiled for each size
            run_batch(served, clock, batch, 4, "constrained", f"warm-{batch}")
        timings = served.engine.runner.timings = StepTimings()
        steps: dict[str, dict] = {}
        for batch in batches:
            for round_index in range(args.rounds):  # the arms alternate, so load changes hit both alike
                for arm in arms:
                    timings.take()
                    times = run_batch(served, clock, batch, args.new_tokens, arm, f"{arm}-{batch}-{round_index}")
                    entry = steps.setdefault(f"{arm}-{batch}", {"wall_ms": [], "cpu_ms": [], "steps": len(times),
                                                                "breakdown": []})
                    for index, name in enumerate(("wall_ms", "cpu_ms")):
                        entry[name].append(1e3 * statistics.fmean(pair[index] for pair in times))
                    entry["steps"] = min(entry["steps"], len(times))
                    entry["breakdown"].append(breakdown(timings.take(), batch))
        served.engine.runner.timings = None
        fills = fill_costs(served, batches)
    finally:
        served.engine.shutdown()
    print(f"best of {args.rounds} rounds, mean ms per decode step of the whole batch (wall, and process CPU)")
    print(f"{'batch':>6} {'arm':>12} {'plain wall':>11} {'arm wall':>9} {'ratio':>6} {'plain CPU':>10} "
          f"{'arm CPU':>8} {'ratio':>6} {'steps':>6}")
    for batch in batches:
        plain = steps[f"plain-{batch}"]
        for arm in arms[1:]:
            constrained = steps[f"{arm}-{batch}"]
            row = f"{batch:>6} {arm:>12}"
            for name, width, arm_width in (("wall_ms", 11, 9), ("cpu_ms", 10, 8)):
                best_plain, best_constrained = min(plain[name]), min(constrained[name])
                row += (f" {best_plain:>{width}.1f} {best_constrained:>{arm_width}.1f}"
                        f" {best_constrained / best_plain:>6.3f}")
            print(row + f" {min(plain['steps'], constrained['steps']):>6}")
    print("\nbreakdown of the best wall round, mean ms per step of the whole batch (device figures on CUDA only)")
    print(f"{'batch':>6} {'arm':>12} {'host fill':>10} {'host queue':>11} {'dev forward':>12} {'dev wait':>9} "
          f"{'dev sample':>11}")
    for batch in batches:
        for arm in arms:
            entry = steps[f"{arm}-{batch}"]
            best = entry["breakdown"][entry["wall_ms"].index(min(entry["wall_ms"]))]
            cells = [f"{best[name]:.3f}" if best[name] is not None else "-" for name in BREAKDOWN]
            print(f"{batch:>6} {arm:>12} {cells[0]:>10} {cells[1]:>11} {cells[2]:>12} {cells[3]:>9} {cells[4]:>11}")
    per_row = fills["per_row_us"]
    print(f"\nmask fill per row over {len(raw_cases()['schemas'])} schemas (median of a 32-token walk each): "
          f"p50 {per_row['p50']:.1f} us, p99 {per_row['p99']:.1f} us, max {per_row['max']:.1f} us")
    for batch, figures in fills["batch"].items():
        print(f"  {batch:>4} rows: one matcher at a time {figures['one_at_a_time_ms']:.3f} ms, "
              f"xgrammar batch fill {figures['batch_fill_ms']:.3f} ms")
    compile_ms = {arm: {"p50": 1e3 * _percentile(values, 0.5), "p99": 1e3 * _percentile(values, 0.99)}
                  for arm, values in compiles.items()}
    print(f"\ngrammar compile over {len(compiles['first'])} schemas:")
    for arm, figures in compile_ms.items():
        print(f"{arm:>8}: p50 {figures['p50']:.2f} ms, p99 {figures['p99']:.2f} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "structured_output", "date": date.today().isoformat(), "machine": platform.machine(),
        "device": args.device, "torch_threads": torch.get_num_threads(), "args": vars(args) | {"out": str(args.out)},
        "step_ms": steps, "compile_ms": compile_ms, "fill": fills,
    }, indent=2))


if __name__ == "__main__":
    main()
