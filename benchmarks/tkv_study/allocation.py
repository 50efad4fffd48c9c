"""Codec recipes for the study: calibrated per-layer TKV codecs as a K/V transform, measured per-layer
sensitivity, and the greedy per-layer bit allocation for a target average."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from arbi_grpc.kv_codec import (
    SUPPORTED_BITS,
    ChannelTransform,
    TkvLayerCodec,
    TkvSpec,
    calibrate_channels,
    query_channel_weights,
)
from benchmarks.tkv_study.harness import WINDOW, KvTransform, StudyModel

KIND_KEYS, KIND_VALUES = "K", "V"
REFERENCE_BITS = 8


@dataclass(frozen=True)
class Recipe:
    """How the codec is calibrated and applied: group size, rotation, scale method, centering, query-weighted key
    error, and how many leading tokens of each window stay unquantized (the attention sink)."""

    group_size: int
    rotate: bool
    method: str
    center: bool = False
    query_weighted: bool = False
    sink_tokens: int = 0


@dataclass
class Activations:
    """Calibration activations per layer: keys/values [N*WINDOW, Hkv, D], queries [M, Hq, D]."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    queries: list[torch.Tensor]

    def samples(self, kind: str, layer: int, skip_positions: int) -> torch.Tensor:
        """Keys or values of `layer` without the first `skip_positions` positions of every window."""
        flat = self.keys[layer] if kind == KIND_KEYS else self.values[layer]
        per_window = flat.view(-1, WINDOW, *flat.shape[1:])  # [N, W, Hkv, D]
        return per_window[:, skip_positions:].reshape(-1, *flat.shape[1:])


@dataclass
class ScaleTable:
    """Channel transforms per (layer, K/V, bits) for one recipe, computed lazily from calibration activations."""

    activations: Activations
    recipe: Recipe
    _cache: dict[tuple[int, str, int], ChannelTransform] = field(default_factory=dict)

    def channel_transform(self, layer: int, kind: str, bits: int) -> ChannelTransform:
        slot = (layer, kind, bits)
        if slot not in self._cache:
            recipe = self.recipe
            samples = self.activations.samples(kind, layer, recipe.sink_tokens)
            weights = None
            if kind == KIND_KEYS and recipe.query_weighted:
                weights = query_channel_weights(self.activations.queries[layer], samples.shape[1], recipe.rotate)
            self._cache[slot] = calibrate_channels(
                samples, bits, recipe.group_size, recipe.rotate, recipe.method, recipe.center, weights
            )
        return self._cache[slot]

    def transform(self, layer_bits: list[tuple[int, int]]) -> KvTransform:
        codecs = [
            TkvLayerCodec(
                TkvSpec(key_bits, value_bits, self.recipe.group_size),
                self.channel_transform(layer, KIND_KEYS, key_bits),
                self.channel_transform(layer, KIND_VALUES, value_bits),
                self.recipe.rotate,
            )
            for layer, (key_bits, value_bits) in enumerate(layer_bits)
        ]

        return sink_preserving_transform(codecs, self.recipe.sink_tokens)


def sink_preserving_transform(codecs: list[TkvLayerCodec], sink_tokens: int) -> KvTransform:
    """Fake-quantize each layer's K/V with its codec, keeping each window's first `sink_tokens` positions exact
    (the cache keeps them in fp16)."""

    def fake_quantize(layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        new_keys, new_values = keys.clone(), values.clone()  # [B, T, Hkv, D]
        new_keys[:, sink_tokens:] = codecs[layer].fake_quantize_keys(keys[:, sink_tokens:])
        new_values[:, sink_tokens:] = codecs[layer].fake_quantize_values(values[:, sink_tokens:])
        return new_keys, new_values

    return fake_quantize


def measure_sensitivity(
    study: StudyModel, dev_windows: torch.Tensor, table: ScaleTable, levels: tuple[int, ...]
) -> dict[tuple[int, str, int], float]:
    """Mean-loss increase when one layer's K (or V) drops to `bits`, every other slot at REFERENCE_BITS."""
    reference_bits = [(REFERENCE_BITS, REFERENCE_BITS)] * study.num_layers
    reference = study.window_losses(dev_windows, table.transform(reference_bits)).double().mean().item()
    sensitivity = {}
    for layer in range(study.num_layers):
        for kind in (KIND_KEYS, KIND_VALUES):
            for bits in levels:
                layer_bits = list(reference_bits)
                layer_bits[layer] = (bits, REFERENCE_BITS) if kind == KIND_KEYS else (REFERENCE_BITS, bits)
                loss = study.window_losses(dev_windows, table.transform(layer_bits)).double().mean().item()
                sensitivity[(layer, kind, bits)] = loss - reference
    return sensitivity


def _monotone_costs(sensitivity: dict[tuple[int, str, int], float], layer: int, kind: str) -> dict[int, float]:
    """Loss cost per supported bit width for one slot: measured, clamped >= 0, non-increasing with bits."""
    costs: dict[int, float] = {}
    running = float("inf")
    for bits in SUPPORTED_BITS:
        measured = 0.0 if bits == REFERENCE_BITS else sensitivity.get((layer, kind, bits))
        if measured is None:
            continue
        running = min(running, max(measured, 0.0))
        costs[bits] = running
    return costs


def greedy_allocation(
    sensitivity: dict[tuple[int, str, int], float], num_layers: int, average_bits: float
) -> list[tuple[int, int]]:
    """Start every slot at its lowest measured width; repeatedly take the upgrade with the largest estimated
    loss reduction per added bit that keeps the mean bits <= average_bits."""
    slots = [(layer, kind) for layer in range(num_layers) for kind in (KIND_KEYS, KIND_VALUES)]
    costs = {slot: _monotone_costs(sensitivity, *slot) for slot in slots}
    bits = {slot: min(costs[slot]) for slot in slots}
    budget = round(average_bits * len(slots))
    while True:
        spare = budget - sum(bits.values())
        best: tuple[float, tuple[int, str], int] | None = None
        for slot in slots:
            for target, cost in costs[slot].items():
                added = target - bits[slot]
                if 0 < added <= spare:
                    gain = (costs[slot][bits[slot]] - cost) / added
                    if best is None or gain > best[0]:
                        best = (gain, slot, target)
        if best is None or best[0] <= 0:
            break
        bits[best[1]] = best[2]
    return [(bits[(layer, KIND_KEYS)], bits[(layer, KIND_VALUES)]) for layer in range(num_layers)]
