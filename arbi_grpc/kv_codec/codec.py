"""One layer's TKV codec: rotate, center, scale per channel, quantize (and the exact inverse).

Encode: x [..., H, D] -> y = Hadamard(x) (optional) -> (y - m) * s -> grouped asymmetric quantization, where
m (shift) and s (scale) are calibrated [H, D] vectors living in the rotated space. Decode stops in the rotated
space (`decode_*_rotated`: y = codes / s + m, what a fused kernel reads; it rotates the query instead and
un-rotates the attention output once) or goes all the way back (`decode_*`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec.hadamard import hadamard_rotate
from arbi_grpc.kv_codec.quantize import QuantizedGroups, dequantize_groups, quantize_groups
from arbi_grpc.kv_codec.spec import TkvSpec, validate_group_size


@dataclass(frozen=True)
class ChannelTransform:
    """Calibrated per-channel affine map of one tensor kind (keys or values): stored = (y - shift) * scale."""

    scale: torch.Tensor | None = None
    shift: torch.Tensor | None = None

    def validate(self, name: str, group_size: int) -> None:
        for part, tensor in (("scale", self.scale), ("shift", self.shift)):
            if tensor is None:
                continue
            if tensor.dim() != 2:
                raise InvalidArgumentError(name, f"{part} must be [num_kv_heads, head_dim], got {list(tensor.shape)}")
            if not bool(torch.isfinite(tensor).all()):
                raise InvalidArgumentError(name, f"{part} must be finite")
            validate_group_size(group_size, tensor.shape[1])
        if self.scale is not None and not bool((self.scale > 0).all()):
            raise InvalidArgumentError(name, "scale must be positive")
        if self.scale is not None and self.shift is not None and self.scale.shape != self.shift.shape:
            raise InvalidArgumentError(
                name, f"scale {list(self.scale.shape)} and shift {list(self.shift.shape)} differ"
            )

    def check_heads(self, x: torch.Tensor) -> None:
        for tensor in (self.scale, self.shift):
            if tensor is not None and tuple(x.shape[-2:]) != tuple(tensor.shape):
                raise InvalidArgumentError(
                    "kv", f"expected [..., {tensor.shape[0]}, {tensor.shape[1]}], got {list(x.shape)}"
                )

    def forward(self, rotated: torch.Tensor) -> torch.Tensor:
        if self.shift is not None:
            rotated = rotated - self.shift.to(rotated.device, torch.float32)
        if self.scale is not None:
            rotated = rotated * self.scale.to(rotated.device, torch.float32)
        return rotated

    def inverse(self, stored: torch.Tensor) -> torch.Tensor:
        if self.scale is not None:
            stored = stored / self.scale.to(stored.device, torch.float32)
        if self.shift is not None:
            stored = stored + self.shift.to(stored.device, torch.float32)
        return stored


@dataclass(frozen=True, eq=False)
class TkvLayerCodec:
    """Encoder/decoder for one layer's keys and values (channel transforms default to identity)."""

    spec: TkvSpec
    keys: ChannelTransform = ChannelTransform()
    values: ChannelTransform = ChannelTransform()
    rotate: bool = True

    def __post_init__(self) -> None:
        self.keys.validate("key_transform", self.spec.group_size)
        self.values.validate("value_transform", self.spec.group_size)

    def into_rotated_space(self, x: torch.Tensor) -> torch.Tensor:
        """Bring a query (or fp16 sink key/value) [..., D] into the storage space: (Hq).(Hk) == q.k."""
        return hadamard_rotate(x) if self.rotate else x

    def out_of_rotated_space(self, x: torch.Tensor) -> torch.Tensor:
        """Bring an attention output computed from rotated values back to model space (H is self-inverse)."""
        return hadamard_rotate(x) if self.rotate else x

    def encode_keys(self, keys: torch.Tensor) -> QuantizedGroups:
        """Encode keys [..., H, D] (after RoPE, as the cache stores them)."""
        return self._encode(keys, self.spec.key_bits, self.keys)

    def encode_values(self, values: torch.Tensor) -> QuantizedGroups:
        """Encode values [..., H, D]."""
        return self._encode(values, self.spec.value_bits, self.values)

    def decode_keys_rotated(self, encoded: QuantizedGroups) -> torch.Tensor:
        """Keys [..., H, D] in the rotated space (channel transform undone, rotation kept), fp32."""
        return self.keys.inverse(dequantize_groups(encoded))

    def decode_values_rotated(self, encoded: QuantizedGroups) -> torch.Tensor:
        """Values [..., H, D] in the rotated space, fp32."""
        return self.values.inverse(dequantize_groups(encoded))

    def decode_keys(self, encoded: QuantizedGroups) -> torch.Tensor:
        """Keys [..., H, D] back in model space, fp32."""
        return self.out_of_rotated_space(self.decode_keys_rotated(encoded))

    def decode_values(self, encoded: QuantizedGroups) -> torch.Tensor:
        """Values [..., H, D] back in model space, fp32."""
        return self.out_of_rotated_space(self.decode_values_rotated(encoded))

    def fake_quantize_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """Keys after an encode/decode round trip, in keys' dtype (for quality studies)."""
        return self.decode_keys(self.encode_keys(keys)).to(keys.dtype)

    def fake_quantize_values(self, values: torch.Tensor) -> torch.Tensor:
        """Values after an encode/decode round trip, in values' dtype."""
        return self.decode_values(self.encode_values(values)).to(values.dtype)

    def _encode(self, x: torch.Tensor, bits: int, transform: ChannelTransform) -> QuantizedGroups:
        transform.check_heads(x)
        rotated = hadamard_rotate(x.float()) if self.rotate else x.float()  # [..., H, D]
        return quantize_groups(transform.forward(rotated), bits, self.spec.group_size)
