"""Weights kept in GGUF's block quantization (groups of 32 along the input axis): the stored form in a model
directory's safetensors and its exact float32 meaning.

Two kinds, each named by the suffix of its tensors beside the weight's checkpoint name `<name>`:
- "q4" (GGUF Q4_0, Q4_1): `<name>.q4` uint8 [N, K / 2], two 4-bit codes per byte (element 2i in the low nibble,
  2i + 1 in the high one), `<name>.scale` and `<name>.min` float32 [N, K / 32]: w = scale * q + min.
- "q8" (GGUF Q8_0): `<name>.q8` int8 [N, K], `<name>.scale` float32 [N, K / 32]: w = scale * q.
`dequantize` is the reference every kernel is checked against (it equals gguf-py's float32 dequantization).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from arbi_grpc.errors import ModelLoadError

GROUP_SIZE = 32
CODE_SUFFIXES = {"q4": ".q4", "q8": ".q8"}
SCALE_SUFFIX, MIN_SUFFIX = ".scale", ".min"
STORED_SUFFIXES = (*CODE_SUFFIXES.values(), SCALE_SUFFIX, MIN_SUFFIX)


@dataclass(frozen=True)
class QuantizedWeight:
    """One [N, K] weight matrix in its stored quantized form (CPU tensors)."""

    kind: str  # "q4" or "q8"
    codes: Tensor  # q4: uint8 [N, K / 2]; q8: int8 [N, K]
    scale: Tensor  # float32 [N, K / 32]
    minimum: Tensor | None  # float32 [N, K / 32] for q4, None for q8

    @property
    def shape(self) -> tuple[int, int]:
        return self.scale.shape[0], self.scale.shape[1] * GROUP_SIZE

    @property
    def nbytes(self) -> int:
        parts = [self.codes, self.scale] + ([self.minimum] if self.minimum is not None else [])
        return sum(part.numel() * part.element_size() for part in parts)

    def integer_codes(self) -> Tensor:
        """The codes as int32 [N, K]: 0..15 for q4, -128..127 for q8."""
        if self.kind == "q8":
            return self.codes.to(torch.int32)
        low, high = self.codes & 0x0F, self.codes >> 4
        return torch.stack((low, high), dim=-1).reshape(self.codes.shape[0], -1).to(torch.int32)

    def dequantize(self) -> Tensor:
        """float32 [N, K]."""
        return self._dequantize(self.integer_codes(), self.scale, self.minimum)

    @staticmethod
    def _dequantize(integers: Tensor, scale: Tensor, minimum: Tensor | None) -> Tensor:
        rows, groups = scale.shape
        grouped = integers.to(torch.float32).view(rows, groups, GROUP_SIZE) * scale[:, :, None]
        if minimum is not None:
            grouped = grouped + minimum[:, :, None]
        return grouped.view(rows, groups * GROUP_SIZE)

    def stored_tensors(self, name: str) -> dict[str, Tensor]:
        """The safetensors entries of this weight under checkpoint name `name`."""
        stored = {name + CODE_SUFFIXES[self.kind]: self.codes, name + SCALE_SUFFIX: self.scale}
        if self.minimum is not None:
            stored[name + MIN_SUFFIX] = self.minimum
        return stored


def stored_base_name(name: str) -> str | None:
    """`<name>` for a stored quantized part `<name><suffix>`; None for any other tensor name."""
    for suffix in STORED_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return None


def from_stored(name: str, parts: dict[str, Tensor], expected_shape: tuple[int, ...], source: str) -> QuantizedWeight:
    """The weight `name` from its stored parts (keyed by suffix), checked against `expected_shape` [N, K]."""
    kinds = [kind for kind, suffix in CODE_SUFFIXES.items() if suffix in parts]
    if len(kinds) != 1 or SCALE_SUFFIX not in parts or (kinds[0] == "q4") != (MIN_SUFFIX in parts):
        raise ModelLoadError(f"{source}: quantized tensor {name!r} has an incomplete set of parts {sorted(parts)}")
    kind = kinds[0]
    weight = QuantizedWeight(kind, parts[CODE_SUFFIXES[kind]], parts[SCALE_SUFFIX], parts.get(MIN_SUFFIX))
    if len(expected_shape) != 2 or expected_shape[1] % GROUP_SIZE:
        raise ModelLoadError(f"{source}: tensor {name!r} of shape {list(expected_shape)} cannot be block-quantized")
    rows, columns = expected_shape
    code_shape = (rows, columns // 2) if kind == "q4" else (rows, columns)
    code_dtype = torch.uint8 if kind == "q4" else torch.int8
    group_shape = (rows, columns // GROUP_SIZE)
    checks = [(weight.codes, code_shape, code_dtype), (weight.scale, group_shape, torch.float32)]
    if weight.minimum is not None:
        checks.append((weight.minimum, group_shape, torch.float32))
    for tensor, shape, dtype in checks:
        if tuple(tensor.shape) != shape or tensor.dtype != dtype:
            raise ModelLoadError(
                f"{source}: quantized tensor {name!r} has a part {tensor.dtype}{list(tensor.shape)}, "
                f"expected {dtype}{list(shape)} for shape {list(expected_shape)}"
            )
    return weight


def concatenate(weights: list[QuantizedWeight]) -> QuantizedWeight:
    """The weights stacked along the output axis (the fused q/k/v or gate/up matrix); one kind only."""
    kinds = {weight.kind for weight in weights}
    if len(kinds) != 1:
        raise NotImplementedError(f"fusing projections stored as different quantizations {sorted(kinds)}")
    minimum = None if weights[0].minimum is None else torch.cat([weight.minimum for weight in weights])
    return QuantizedWeight(
        weights[0].kind,
        torch.cat([weight.codes for weight in weights]),
        torch.cat([weight.scale for weight in weights]),
        minimum,
    )
