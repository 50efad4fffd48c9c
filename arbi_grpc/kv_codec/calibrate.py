"""Offline calibration of TKV's per-channel transforms (shift and scale) from collected K/V activations.

Everything happens in the rotated space (after the Hadamard rotation when it is on), per layer, per kv head,
per channel c. Shift ("center"): m_c = mean of the samples (post-RoPE keys have large near-constant channels).
Scale methods, with a_c = max |y_c - m_c| over the samples:
- "none": s_c = 1.
- "sqrt_max": s_c = a_c^-1/2 (smoothing: halves the log-spread of channel ranges).
- "mse": s_c = a_c^-alpha with alpha picked per head from ALPHA_GRID to minimize the round-trip squared error of
  the actual codec on the samples, optionally weighted per channel (for keys: the queries' second moments, so
  error lands where queries do not look); alpha = 0 is "none", so "mse" never loses on the calibration data.
Scales are normalized to a geometric mean of 1 per head, so values keep their overall magnitude.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec.calibration import TkvCalibration
from arbi_grpc.kv_codec.codec import ChannelTransform
from arbi_grpc.kv_codec.hadamard import hadamard_rotate
from arbi_grpc.kv_codec.quantize import dequantize_groups, quantize_groups

CALIBRATION_METHODS: tuple[str, ...] = ("none", "sqrt_max", "mse")
ALPHA_GRID: tuple[float, ...] = (0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75)
MAX_CALIBRATION_SAMPLES = 8192
_RANGE_FLOOR = 1e-6


def _subsample(samples: torch.Tensor) -> torch.Tensor:
    if samples.shape[0] <= MAX_CALIBRATION_SAMPLES:
        return samples
    pick = torch.linspace(0, samples.shape[0] - 1, MAX_CALIBRATION_SAMPLES, device=samples.device).round().long()
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
        errors = torch.stack([_round_trip_error(centered, s, bits, group_size, weights) for s in candidates])  # [A, H]
        scale = candidates[errors.argmin(dim=0), torch.arange(channel_range.shape[0])]
    return ChannelTransform(scale.contiguous().cpu(), shift.contiguous().cpu())


def calibrate_tkv(
    keys_per_layer: Sequence[torch.Tensor],
    values_per_layer: Sequence[torch.Tensor],
    layer_bits: Sequence[tuple[int, int]],
    group_size: int,
    model_fingerprint: str,
    rotate: bool = True,
    method: str = "mse",
    center: bool = True,
    key_weights_per_layer: Sequence[torch.Tensor] | None = None,
    sink_tokens: int = 1,
) -> TkvCalibration:
    """Build a TkvCalibration from per-layer post-RoPE keys and values, each [tokens, kv_heads, head_dim].

    The samples must leave out each sequence's first `sink_tokens` positions: the cache keeps those in fp16, and
    their outsized keys would otherwise dominate the channel ranges.
    key_weights_per_layer: optional per-layer [kv_heads, head_dim] key-error weights (query_channel_weights).
    """
    counts = {len(keys_per_layer), len(values_per_layer), len(layer_bits)}
    if key_weights_per_layer is not None:
        counts.add(len(key_weights_per_layer))
    if len(counts) != 1:
        raise InvalidArgumentError("kv_samples", "keys, values, bit pairs (and key weights) need one entry per layer")
    key_weights = key_weights_per_layer or [None] * len(layer_bits)
    keys = [
        calibrate_channels(samples, key_bits, group_size, rotate, method, center, weights)
        for samples, (key_bits, _), weights in zip(keys_per_layer, layer_bits, key_weights)
    ]
    values = [
        calibrate_channels(samples, value_bits, group_size, rotate, method, center)
        for samples, (_, value_bits) in zip(values_per_layer, layer_bits)
    ]
    label = method + ("+center" if center else "") + ("+qweighted" if key_weights_per_layer is not None else "")
    return TkvCalibration(
        model_fingerprint,
        group_size,
        rotate,
        tuple((int(k), int(v)) for k, v in layer_bits),
        torch.stack([t.scale for t in keys]),
        torch.stack([t.scale for t in values]),
        torch.stack([t.shift for t in keys]),
        torch.stack([t.shift for t in values]),
        label,
        sink_tokens,
    )
