"""Offline calibration of TKV's per-channel transforms (shift and scale) from collected K/V activations.

Everything happens in the rotated space (after the Hadamard rotation when it is on), per layer, per kv head,
per channel c. Shift ("center"): m_c = mean of the samples (post-RoPE keys have large near-constant channels).
Scale methods, with a_c = max |y_c - m_c| over the samples:
- "none": s_c = 1.
- "sqrt_max": s_c = a_c^-1/2 (smoothing: halves the log-spread of channel ranges).
- "mse": s_c = a_c^-alpha with alpha picked per head from ALPHA_GRID to minimize the round-trip squared error of
  the actual codec on MAX_SEARCH_SAMPLES evenly spaced samples, optionally weighted per channel (for keys: the
  queries' second moments, so error lands where queries do not look); alpha = 0 is "none", so "mse" never
  loses to "none" on those samples.
Scales are normalized to a geometric mean of 1 per head, so values keep their overall magnitude.

Keys and values have their own ChannelRecipe (method, center). The defaults are "mse" + center for keys and the
rotation alone for values (method "none", no shift): on SmolLM2 calibrated on the bundled text, value statistics
from text of another domain cost K4V3 0.7-0.9 points of wikitext perplexity (docs/tkv.md, third study), and the
rotation alone needs no samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration
from arbi_grpc.kv_codec.codec import ChannelTransform
from arbi_grpc.kv_codec.hadamard import hadamard_rotate
from arbi_grpc.kv_codec.quantize import dequantize_groups, quantize_groups

CALIBRATION_METHODS: tuple[str, ...] = ("none", "sqrt_max", "mse")
ALPHA_GRID: tuple[float, ...] = (0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75)
MAX_CALIBRATION_SAMPLES = 8192
MAX_SEARCH_SAMPLES = 2048
"""Samples (evenly spaced among the calibration samples) on which the "mse" method compares its alphas."""
_RANGE_FLOOR = 1e-6


def _subsample(samples: torch.Tensor, limit: int = MAX_CALIBRATION_SAMPLES) -> torch.Tensor:
    if samples.shape[0] <= limit:
        return samples
    pick = torch.linspace(0, samples.shape[0] - 1, limit, device=samples.device).round().long()
    return samples[pick]


def _normalized_power_scales(channel_range: torch.Tensor, alpha: float) -> torch.Tensor:
    """s = range^-alpha per channel, normalized to geometric mean 1 over the last dim; range: [H, D]."""
    log_scale = -alpha * channel_range.clamp_min(_RANGE_FLOOR).log()
    return (log_scale - log_scale.mean(dim=-1, keepdim=True)).exp()


def _round_trip_error(
    centered: torch.Tensor, scales: torch.Tensor, bits: int, group_size: int, weights: torch.Tensor
) -> torch.Tensor:
    """Per-head weighted squared error [H] of quantizing centered samples [N, H, D] with channel scales [H, D]."""
    decoded = dequantize_groups(quantize_groups(centered * scales, bits, group_size)) / scales
    return ((decoded - centered).pow(2) * weights).mean(dim=(0, 2))


@dataclass(frozen=True)
class ChannelRecipe:
    """How one tensor kind (keys or values) is calibrated: the scale method and whether to center."""

    method: str = "mse"
    center: bool = True

    def __post_init__(self) -> None:
        if self.method not in CALIBRATION_METHODS:
            raise InvalidArgumentError(
                "kv_calibration_method", f"{self.method!r} is not one of {list(CALIBRATION_METHODS)}"
            )

    @property
    def label(self) -> str:
        return self.method + ("+center" if self.center else "")


KEY_RECIPE = ChannelRecipe("mse", center=True)
VALUE_RECIPE = ChannelRecipe("none", center=False)


def query_channel_weights(queries: torch.Tensor, num_kv_heads: int, rotate: bool = True) -> torch.Tensor:
    """Second moments [num_kv_heads, D] of post-RoPE queries [N, Hq, D] in the key storage space, averaged over
    the query heads sharing each kv head and normalized to mean 1 per kv head."""
    if queries.dim() != 3 or queries.shape[1] % num_kv_heads:
        raise InvalidArgumentError(
            "queries", f"must be [tokens, q_heads, head_dim] with q_heads a multiple of {num_kv_heads}"
        )
    rotated = hadamard_rotate(_subsample(queries).float()) if rotate else _subsample(queries).float()
    moments = rotated.pow(2).mean(dim=0).view(num_kv_heads, -1, queries.shape[-1]).mean(dim=1)  # [Hkv, D]
    return moments / moments.mean(dim=-1, keepdim=True).clamp_min(_RANGE_FLOOR)


def calibrate_channels(
    samples: torch.Tensor,
    bits: int,
    group_size: int,
    rotate: bool = True,
    method: str = "mse",
    center: bool = True,
    weights: torch.Tensor | None = None,
) -> ChannelTransform:
    """Calibrated shift and scale ([H, D] fp32 each, on the CPU) for one layer's keys or values; samples: [N, H, D]
    as the cache stores them; weights: optional [H, D] importance of each channel's error (see "mse")."""
    if method not in CALIBRATION_METHODS:
        raise InvalidArgumentError("kv_calibration_method", f"{method!r} is not one of {list(CALIBRATION_METHODS)}")
    if samples.dim() != 3 or samples.shape[0] == 0:
        raise InvalidArgumentError(
            "kv_samples", f"must be a non-empty [tokens, kv_heads, head_dim], got {list(samples.shape)}"
        )
    rotated = hadamard_rotate(_subsample(samples).float()) if rotate else _subsample(samples).float()  # [N, H, D]
    shift = rotated.mean(dim=0) if center else torch.zeros_like(rotated[0])  # [H, D]
    centered = rotated - shift
    channel_range = centered.abs().amax(dim=0)  # [H, D]
    if method == "none":
        scale = torch.ones_like(channel_range)
    elif method == "sqrt_max":
        scale = _normalized_power_scales(channel_range, 0.5)
    else:
        weights = torch.ones_like(channel_range) if weights is None else weights.to(channel_range)
        candidates = torch.stack([_normalized_power_scales(channel_range, alpha) for alpha in ALPHA_GRID])  # [A, H, D]
        searched = _subsample(centered, MAX_SEARCH_SAMPLES)
        errors = torch.stack([_round_trip_error(searched, s, bits, group_size, weights) for s in candidates])  # [A, H]
        scale = candidates[errors.argmin(dim=0), torch.arange(channel_range.shape[0])]
    return ChannelTransform(scale.contiguous().cpu(), shift.contiguous().cpu())


@dataclass
class ChannelTable:
    """Channel transforms per (layer, keys|values, bits), calibrated lazily from per-layer samples and cached, so
    that a bit-allocation search and the final bundle share them. Samples: [tokens, kv_heads, head_dim] per
    layer, without each sequence's sink positions; key_weights: optional [kv_heads, head_dim] per layer."""

    keys_per_layer: Sequence[torch.Tensor]
    values_per_layer: Sequence[torch.Tensor]
    group_size: int
    rotate: bool = True
    key_recipe: ChannelRecipe = KEY_RECIPE
    value_recipe: ChannelRecipe = VALUE_RECIPE
    key_weights_per_layer: Sequence[torch.Tensor] | None = None
    _cache: dict[tuple[int, bool, int], ChannelTransform] = field(default_factory=dict)

    def __post_init__(self) -> None:
        counts = {len(self.keys_per_layer), len(self.values_per_layer)}
        if self.key_weights_per_layer is not None:
            counts.add(len(self.key_weights_per_layer))
        if len(counts) != 1:
            raise InvalidArgumentError("kv_samples", "keys, values (and key weights) need one entry per layer")

    @property
    def num_layers(self) -> int:
        return len(self.keys_per_layer)

    def transform(self, layer: int, keys: bool, bits: int) -> ChannelTransform:
        """The calibrated transform of `layer`'s keys (keys=True) or values at `bits` bits."""
        slot = (layer, keys, bits)
        if slot not in self._cache:
            samples = (self.keys_per_layer if keys else self.values_per_layer)[layer]
            weights = self.key_weights_per_layer[layer] if keys and self.key_weights_per_layer is not None else None
            recipe = self.key_recipe if keys else self.value_recipe
            self._cache[slot] = calibrate_channels(
                samples, bits, self.group_size, self.rotate, recipe.method, recipe.center, weights
            )
        return self._cache[slot]

    def round_trip_error(self, layer: int, keys: bool, bits: int) -> float:
        """Mean squared error, in the rotated space, of `layer`'s samples through the codec at `bits` bits."""
        samples = (self.keys_per_layer if keys else self.values_per_layer)[layer]
        samples = _subsample(samples, MAX_SEARCH_SAMPLES).float()
        rotated = hadamard_rotate(samples) if self.rotate else samples
        transform = self.transform(layer, keys, bits)
        encoded = quantize_groups(transform.forward(rotated), bits, self.group_size)
        decoded = transform.inverse(dequantize_groups(encoded))
        return (decoded - rotated).pow(2).mean().item()

    def calibration(
        self, layer_bits: Sequence[tuple[int, int]], model_fingerprint: str, sink_tokens: int = 1
    ) -> TkvCalibration:
        """The TkvCalibration with `layer_bits` (one (key_bits, value_bits) pair per layer)."""
        if len(layer_bits) != self.num_layers:
            raise InvalidArgumentError("kv_samples", f"{len(layer_bits)} bit pairs for {self.num_layers} layers")
        keys = [self.transform(layer, True, k) for layer, (k, _) in enumerate(layer_bits)]
        values = [self.transform(layer, False, v) for layer, (_, v) in enumerate(layer_bits)]
        label = (
            f"K:{self.key_recipe.label}" + ("+qweighted" if self.key_weights_per_layer is not None else "")
            + f" V:{self.value_recipe.label}"
        )
        return TkvCalibration(
            model_fingerprint,
            self.group_size,
            self.rotate,
            tuple((int(k), int(v)) for k, v in layer_bits),
            torch.stack([t.scale for t in keys]),
            torch.stack([t.scale for t in values]),
            torch.stack([t.shift for t in keys]),
            torch.stack([t.shift for t in values]),
            label,
            sink_tokens,
        )


def calibrate_tkv(
    keys_per_layer: Sequence[torch.Tensor],
    values_per_layer: Sequence[torch.Tensor],
    layer_bits: Sequence[tuple[int, int]],
    group_size: int,
    model_fingerprint: str,
    rotate: bool = True,
    key_recipe: ChannelRecipe = KEY_RECIPE,
    value_recipe: ChannelRecipe = VALUE_RECIPE,
    key_weights_per_layer: Sequence[torch.Tensor] | None = None,
    sink_tokens: int = 1,
) -> TkvCalibration:
    """Build a TkvCalibration from per-layer post-RoPE keys and values, each [tokens, kv_heads, head_dim].

    The samples must leave out each sequence's first `sink_tokens` positions: the cache keeps those in fp16, and
    their outsized keys would otherwise dominate the channel ranges.
    key_weights_per_layer: optional per-layer [kv_heads, head_dim] key-error weights (query_channel_weights).
    """
    table = ChannelTable(
        keys_per_layer, values_per_layer, group_size, rotate, key_recipe, value_recipe, key_weights_per_layer
    )
    return table.calibration(layer_bits, model_fingerprint, sink_tokens)
