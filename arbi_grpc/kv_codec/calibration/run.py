"""One `arbi-serve calibrate` run: text -> windows -> K/V through the engine's decoder -> channel transforms ->
per-layer bits (uniform, or allocated for an average budget) -> the bundle, with a report of what was done.

Allocation for an average A: `sensitivity.py` measures every layer's keys and values one width off the
operating point of A on the dev windows. Two candidates spend the operating point's bits: `greedy_allocation`
(costs linear in each slot's round-trip error) and measured swaps (from the uniform point, the most sensitive
slot one width up with the least sensitive one down, pair after pair while each pair lowers the measured dev
divergence, at most MAX_SWAPS pairs). Of the uniform point and the two candidates, the one with the lowest
measured divergence on the dev windows (every K/V through the codec) is written.

The dev measure is the mean KL divergence of the next-token distributions from the model's own with exact K/V,
not the loss against the text: on 2 dev windows a single slot one width lower moved that loss by up to
+-0.017 nats, in both directions, about half of the whole K4V3 penalty (docs/tkv.md). The divergence is
never negative and does not depend on how well the model predicts the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec.calibration.activations import CalibrationRunner, KvRewrite, without_sink
from arbi_grpc.kv_codec.calibration.bit_allocation import (
    KEYS,
    average_bits,
    greedy_allocation,
    moved,
    operating_point,
    sensitivity_swaps,
)
from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration
from arbi_grpc.kv_codec.calibration.channel_transforms import ChannelTable
from arbi_grpc.kv_codec.calibration.fingerprint import model_dir_fingerprint
from arbi_grpc.kv_codec.calibration.sensitivity import operating_point_costs
from arbi_grpc.kv_codec.spec import TkvSpec

MAX_SWAPS = 8


@dataclass(frozen=True)
class CalibrationSettings:
    """Exactly one of average_bits (allocated per layer) and uniform_bits ((key, value) for every layer)."""

    average_bits: float | None = 3.5
    uniform_bits: tuple[int, int] | None = None
    group_size: int = 32
    sink_tokens: int = 1
    window: int = 512
    max_windows: int = 16
    dev_windows: int = 2

    def __post_init__(self) -> None:
        if (self.average_bits is None) == (self.uniform_bits is None):
            raise InvalidArgumentError("avg_bits", "give either an average (--avg-bits) or uniform bits (--kv-bits)")
        if self.average_bits is not None:
            operating_point(self.average_bits)
        else:
            TkvSpec(*self.uniform_bits, self.group_size, self.sink_tokens)
        if self.sink_tokens < 0 or self.window < self.sink_tokens + 2:
            raise InvalidArgumentError(
                "window", f"need sink_tokens >= 0 and window >= sink_tokens + 2, got {self.sink_tokens}, {self.window}"
            )
        if self.max_windows < 1 or self.dev_windows < 1:
            raise InvalidArgumentError("max_windows", "need at least one calibration window and one dev window")


def text_windows(token_ids: list[int], window: int, max_windows: int) -> torch.Tensor:
    """Consecutive non-overlapping windows [N, window] from the start of the text, N <= max_windows."""
    count = min(len(token_ids) // window, max_windows)
    if count == 0:
        raise InvalidArgumentError(
            "calibration_text", f"{len(token_ids)} tokens do not fill one window of {window} tokens"
        )
    return torch.tensor(token_ids[: count * window], dtype=torch.int64).view(count, window)


def fake_quantizing_rewrite(calibration: TkvCalibration) -> KvRewrite:
    """K/V through each layer's codec, positions < sink_tokens kept exact (what attention reads from the cache)."""
    codecs = [calibration.layer_codec(layer) for layer in range(calibration.num_layers)]

    def rewrite(layer: int, positions: torch.Tensor, keys: torch.Tensor, values: torch.Tensor):
        coded = positions >= calibration.sink_tokens  # [T]
        keys, values = keys.clone(), values.clone()
        keys[coded] = codecs[layer].fake_quantize_keys(keys[coded])
        values[coded] = codecs[layer].fake_quantize_values(values[coded])
        return keys, values

    return rewrite


def allocate_bits(
    runner: CalibrationRunner, table: ChannelTable, dev: torch.Tensor, settings: CalibrationSettings
) -> tuple[list[tuple[int, int]], dict]:
    """Per-layer bits for settings.average_bits and a report (dev divergences of the allocation and the uniform
    point, the measured per-slot divergence changes)."""
    point = operating_point(settings.average_bits)
    reference = runner.window_log_probs(dev)
    divergences: dict[tuple[tuple[int, int], ...], float] = {}

    def dev_divergence(layer_bits: Sequence[tuple[int, int]]) -> float:
        key = tuple(layer_bits)
        if key not in divergences:
            calibration = table.calibration(layer_bits, "", settings.sink_tokens)
            divergences[key] = runner.mean_divergence(dev, reference, fake_quantizing_rewrite(calibration))
        return divergences[key]

    def slot_error(layer: int, kind: str, bits: int) -> float:
        return table.round_trip_error(layer, kind == KEYS, bits)

    costs, measured = operating_point_costs(dev_divergence, slot_error, table.num_layers, settings.average_bits)
    uniform = [point] * table.num_layers
    swapped = uniform
    for up, down in sensitivity_swaps(measured, settings.average_bits)[:MAX_SWAPS]:
        candidate = moved(swapped, up, down)
        if candidate is None or dev_divergence(candidate) >= dev_divergence(swapped):
            break
        swapped = candidate
    candidates = {
        "uniform": uniform,
        "allocated": greedy_allocation(costs, table.num_layers, settings.average_bits),
        "swapped": swapped,
    }
    kept = min(candidates, key=lambda name: dev_divergence(candidates[name]))
    report = {
        "operating_point": f"K{point[0]}V{point[1]}",
        **{f"dev_kl_{name}": dev_divergence(bits) for name, bits in candidates.items()},
        **{f"{name}_bits": [list(pair) for pair in candidates[name]] for name in ("allocated", "swapped")},
        "kept": kept,
        "dev_kl_change_one_width_off": {
            f"{layer}{kind}": round(change, 6) for (layer, kind), change in measured.items()
        },
    }
    return candidates[kept], report


def run_calibration(
    model_dir: Path, text_path: Path, settings: CalibrationSettings, output: Path, device: str = "cpu"
) -> dict:
    """Calibrate the model in `model_dir` on the text of `text_path`, write the bundle to `output`, and return
    a report (windows, bits, dev divergences, where the bundle went)."""
    from arbi_grpc.text.tokenizer import TextTokenizer

    try:
        text = Path(text_path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidArgumentError("calibration_text", f"cannot read {text_path}: {error}") from error
    token_ids = TextTokenizer.from_model_dir(model_dir).encode(text)
    windows = text_windows(token_ids, settings.window, settings.max_windows)
    runner = CalibrationRunner.load(model_dir, device)
    activations = runner.collect(windows)
    table = ChannelTable(
        [without_sink(layer.keys, settings.window, settings.sink_tokens) for layer in activations],
        [without_sink(layer.values, settings.window, settings.sink_tokens) for layer in activations],
        settings.group_size,
    )
    report: dict = {"calibration_windows": windows.shape[0], "window": settings.window}
    if settings.uniform_bits is not None:
        layer_bits = [settings.uniform_bits] * table.num_layers
    else:
        dev = windows[-settings.dev_windows :]
        layer_bits, allocation_report = allocate_bits(runner, table, dev, settings)
        report.update(dev_windows=dev.shape[0], **allocation_report)
    calibration = table.calibration(layer_bits, model_dir_fingerprint(model_dir), settings.sink_tokens)
    calibration.save(output)
    report.update(
        average_bits=average_bits(layer_bits), layer_bits=[list(pair) for pair in layer_bits],
        group_size=settings.group_size, sink_tokens=settings.sink_tokens, bundle=str(output),
    )
    return report
