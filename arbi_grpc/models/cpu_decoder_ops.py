"""The decoder's position-wise ops on the CPU: `TorchDecoderOps` with its float32 norms, SwiGLU and rotation each
done by one C++ call (`csrc/decoder_ops.cpp`, built on first use by `cpu_extensions`). A decode step of a small
model is made of such ops at a few hundred values each, where torch's per-op dispatch costs more than the
arithmetic; other dtypes go through the torch reference.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import Tensor

from arbi_grpc.cpu_extensions import load_cpu_extension
from arbi_grpc.models.decoder_ops import DecoderOps, HeadNormWeights, Rotation, TorchDecoderOps

log = logging.getLogger(__name__)
KERNELS_SOURCE = Path(__file__).with_name("csrc") / "decoder_ops.cpp"


def cpu_decoder_ops(inverse_frequencies: Tensor) -> DecoderOps:
    """`CpuDecoderOps`, or the torch reference (with a warning that says why) where the kernels cannot be built."""
    try:
        kernels = load_cpu_extension(KERNELS_SOURCE)
    except RuntimeError as error:
        log.warning("CPU decoder kernels unavailable, using torch's ops (slower decode steps): %s", error)
        return TorchDecoderOps(inverse_frequencies)
    return CpuDecoderOps(inverse_frequencies, kernels)


class CpuDecoderOps(TorchDecoderOps):
    """Float32 contiguous states through the C++ kernels, anything else through `TorchDecoderOps`."""

    def __init__(self, inverse_frequencies: Tensor, kernels) -> None:
        super().__init__(inverse_frequencies)
        self.kernels = kernels

    def rms_norm(self, states: Tensor, weight: Tensor, eps: float) -> Tensor:
        if _float32_rows(states) and weight.dtype == torch.float32:
            return self.kernels.rms_norm(states, weight, eps)
        return super().rms_norm(states, weight, eps)

    def add_rms_norm(self, states: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        if _float32_rows(states) and _float32_rows(residual) and weight.dtype == torch.float32:
            return self.kernels.add_rms_norm(states, residual, weight, eps)
        return super().add_rms_norm(states, residual, weight, eps)

    def silu_and_mul(self, gate_up: Tensor) -> Tensor:
        if _float32_rows(gate_up):
            return self.kernels.silu_and_mul(gate_up)
        return super().silu_and_mul(gate_up)

    def rotation(self, positions: Tensor, dtype: torch.dtype) -> Rotation:
        rotation = super().rotation(positions, dtype)
        if dtype != torch.float32:
            return rotation
        return _CpuRotation(self, rotation.cos[:, 0].contiguous(), rotation.signed_sin[:, 0].contiguous())


class _CpuRotation:
    """The torch rotation's cos and signed sin rows [T, D], applied in place by one kernel call per tensor."""

    def __init__(self, ops: CpuDecoderOps, cos: Tensor, signed_sin: Tensor) -> None:
        self.ops, self.cos, self.signed_sin = ops, cos, signed_sin

    def apply(self, query: Tensor, key: Tensor, head_norms: HeadNormWeights | None) -> tuple[Tensor, Tensor]:
        if head_norms is not None:
            query = self.ops.rms_norm(query, head_norms.query_weight, head_norms.eps)
            key = self.ops.rms_norm(key, head_norms.key_weight, head_norms.eps)
        self.ops.kernels.rotate_(query, self.cos, self.signed_sin)
        self.ops.kernels.rotate_(key, self.cos, self.signed_sin)
        return query, key


def _float32_rows(states: Tensor) -> bool:
    return states.dim() == 2 and states.dtype == torch.float32 and states.is_contiguous()
