"""Fused residual add + RMSNorm: one pass that returns the normalized hidden state and the updated residual.

One program per token row. The sum hidden + residual is rounded to the model dtype (it is what the next
layer adds to), and the normalization reads that rounded sum, so the result matches an unfused model.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from arbi_kernels.checks import (
    FLOAT_DTYPES,
    next_power_of_two,
    require_dtype,
    require_same_device,
    require_same_dtype,
    require_shape,
    require_unit_last_stride,
)
from arbi_kernels.pdl import pdl_launch_options, wait_for_previous_kernel

MAX_HIDDEN_SIZE = 65536


@triton.jit
def _rms_norm_kernel(
    hidden_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr,
    hidden_size, eps,
    stride_hidden, stride_residual, stride_out, stride_residual_out,
    BLOCK: tl.constexpr, HAS_RESIDUAL: tl.constexpr, USE_PDL: tl.constexpr,
):
    wait_for_previous_kernel(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    columns = tl.arange(0, BLOCK)
    mask = columns < hidden_size
    values = tl.load(hidden_ptr + row * stride_hidden + columns, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        residual = tl.load(residual_ptr + row * stride_residual + columns, mask=mask, other=0.0)
        summed = (values + residual.to(tl.float32)).to(residual_out_ptr.dtype.element_ty)
        tl.store(residual_out_ptr + row * stride_residual_out + columns, summed, mask=mask)
        values = summed.to(tl.float32)
    inverse_rms = tl.rsqrt(tl.sum(values * values, axis=0) / hidden_size + eps)
    weight = tl.load(weight_ptr + columns, mask=mask, other=0.0).to(tl.float32)
    normalized = (values * inverse_rms * weight).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + row * stride_out + columns, normalized, mask=mask)


def rms_norm(
    hidden: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(normalized, new_residual) for hidden [T, H] and weight [H].

    With `residual` [T, H], new_residual = hidden + residual (a new tensor) and the norm applies to it;
    without, new_residual is `hidden` itself (the first layer's input). Statistics are float32.
    """
    require_dtype("hidden", hidden, FLOAT_DTYPES)
    require_shape("hidden", hidden, {"num_tokens": None, "hidden_size": None})
    require_unit_last_stride("hidden", hidden)
    num_tokens, hidden_size = hidden.shape
    if hidden_size > MAX_HIDDEN_SIZE:
        raise NotImplementedError(
            f"hidden: hidden_size {hidden_size} exceeds the one-row-per-program limit {MAX_HIDDEN_SIZE}"
        )
    require_dtype("weight", weight, FLOAT_DTYPES)
    require_shape("weight", weight, {"hidden_size": hidden_size})
    require_unit_last_stride("weight", weight)
    if not eps > 0.0:
        raise ValueError(f"eps: must be positive, got {eps}")
    tensors = {"hidden": hidden, "weight": weight}
    if residual is not None:
        require_shape("residual", residual, {"num_tokens": num_tokens, "hidden_size": hidden_size})
        require_same_dtype("residual", residual, "hidden", hidden)
        require_unit_last_stride("residual", residual)
        tensors["residual"] = residual
    require_same_device(tensors)

    normalized = torch.empty_like(hidden)
    new_residual = hidden if residual is None else torch.empty_like(hidden)
    if num_tokens == 0:
        return normalized, new_residual
    block = next_power_of_two(hidden_size)
    residual_in = hidden if residual is None else residual
    _rms_norm_kernel[(num_tokens,)](
        hidden, residual_in, weight, normalized, new_residual,
        hidden_size, eps,
        hidden.stride(0), residual_in.stride(0), normalized.stride(0), new_residual.stride(0),
        BLOCK=block, HAS_RESIDUAL=residual is not None, num_warps=min(16, max(4, block // 1024)),
        **pdl_launch_options(hidden.device),
    )
    return normalized, new_residual
