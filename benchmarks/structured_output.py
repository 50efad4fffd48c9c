"""Benchmark: the cost of output constraints, SmolLM2 in the real engine, one run.

Per-step time: `--batches` requests (greedy) each decode `--new-tokens` tokens, once unconstrained
(ignore_eos) and once with a JSON-schema constraint per row (row i: an array of at least 64 items of case
schema i mod 43 of `tests/data/structured_output/cases.json`, so the grammar cannot end inside the window and
every row does real JSON-schema mask work). The engine thread's `step` is timed; a round's figure is the mean
wall time of the steps where the whole batch decodes (all rows running, none waiting). The arms alternate for
`--rounds` rounds and each reports its best round (the least disturbed by other load), constrained against not,
in wall time and in the process's CPU time (all its threads; less sensitive to other processes on a shared
machine).
The constrained arm runs after its grammars are compiled and cached, so it measures the masks, not compiles.

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
import statistics
import threading
import time
from dataclasses import replace
from datetime import date
from pathlib import Path

import torch

from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.grammar.compile_cache import CompileCache
from arbi_grpc.engine.grammar.compiler import ConstraintCompiler
from arbi_grpc.engine.input_processor import TextPrompt
from arbi_grpc.engine.output_constraint import ConstraintKind, OutputConstraint
from arbi_grpc.engine.request import SchedulingParams
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
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


def _constraint(index: int) -> OutputConstraint:
    schemas = raw_cases()["schemas"]
    item = dict(schemas[index % len(schemas)]["schema"])
    definitions = item.pop("$defs", None)  # `#/$defs/...` references resolve from the root
    array = {"type": "array", "minItems": 64, "items": item, **({"$defs": definitions} if definitions else {})}
    return OutputConstraint(ConstraintKind.JSON_SCHEMA, json.dumps(array))


def run_batch(served: ServedModel, clock: StepClock, batch: int, new_tokens: int, constrained: bool,
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
    parser.add_argument("--out", type=Path, default=Path("bench-results/structured_output.json"))
    args = parser.parse_args()
    batches = [int(batch) for batch in args.batches.split(",")]
    config = EngineConfig(model=str(resolve_model(args.model).directory), device=args.device,
                          kv_cache_memory_mib=args.kv_cache_mib, max_running_requests=max(batches))
    served = build_served_model(config)
    try:
        compiles = compile_times(served)
        clock = StepClock(served)
        run_batch(served, clock, max(batches), 4, True, "warm")  # every row's grammar compiled and cached
        steps: dict[str, dict] = {}
        for batch in batches:
            for round_index in range(args.rounds):  # the arms alternate, so load changes hit both alike
                for arm in ("plain", "constrained"):
                    times = run_batch(served, clock, batch, args.new_tokens, arm == "constrained",
                                      f"{arm}-{batch}-{round_index}")
                    entry = steps.setdefault(f"{arm}-{batch}", {"wall_ms": [], "cpu_ms": [], "steps": len(times)})
                    for index, name in enumerate(("wall_ms", "cpu_ms")):
                        entry[name].append(1e3 * statistics.fmean(pair[index] for pair in times))
                    entry["steps"] = min(entry["steps"], len(times))
    finally:
        served.engine.shutdown()
    print(f"best of {args.rounds} rounds, mean ms per decode step of the whole batch (wall, and process CPU)")
    print(f"{'batch':>6} {'plain wall':>11} {'constrained':>12} {'ratio':>6} {'plain CPU':>10} {'constrained':>12} "
          f"{'ratio':>6} {'steps':>6}")
    for batch in batches:
        plain, constrained = steps[f"plain-{batch}"], steps[f"constrained-{batch}"]
        row = f"{batch:>6}"
        for name, width in (("wall_ms", 11), ("cpu_ms", 10)):
            best_plain, best_constrained = min(plain[name]), min(constrained[name])
            row += f" {best_plain:>{width}.1f} {best_constrained:>12.1f} {best_constrained / best_plain:>6.3f}"
        print(row + f" {min(plain['steps'], constrained['steps']):>6}")
    compile_ms = {arm: {"p50": 1e3 * _percentile(values, 0.5), "p99": 1e3 * _percentile(values, 0.99)}
                  for arm, values in compiles.items()}
    print(f"\ngrammar compile over {len(compiles['first'])} schemas:")
    for arm, figures in compile_ms.items():
        print(f"{arm:>8}: p50 {figures['p50']:.2f} ms, p99 {figures['p99']:.2f} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "structured_output", "date": date.today().isoformat(), "machine": platform.machine(),
        "device": args.device, "torch_threads": torch.get_num_threads(), "args": vars(args) | {"out": str(args.out)},
        "step_ms": steps, "compile_ms": compile_ms,
    }, indent=2))


if __name__ == "__main__":
    main()
