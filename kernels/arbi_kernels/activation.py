"""SiLU-and-multiply, the gated MLP activation: [T, 2I] (gate then up) -> silu(gate) * up, [T, I].

Programs tile (row, column block); the product is computed in float32 and rounded once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from arbi_kernels.checks import (
    FLOAT_DTYPES,
    require_dtype,
    require_shape,
    require_unit_last_stride,
)
from arbi_kernels.pdl import pdl_launch_options, wait_for_previous_kernel

BLOCK_COLUMNS = 1024


@triton.jit
def _silu_and_mul_kernel(
    gate_up_ptr, out_ptr, intermediate_size, stride_gate_up, stride_out, BLOCK: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    wait_for_previous_kernel(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = columns < intermediate_size
    row_ptr = gate_up_ptr + row * stride_gate_up
    gate = tl.load(row_ptr + columns, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(row_ptr + intermediate_size + columns, mask=mask, other=0.0).to(tl.float32)
    activated = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * stride_out + columns, activated.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate_up[:, :I]) * gate_up[:, I:] for gate_up [T, 2I]; returns a new [T, I] tensor."""
    require_dtype("gate_up", gate_up, FLOAT_DTYPES)
    require_shape("gate_up", gate_up, {"num_tokens": None, "two_times_intermediate": None})
    require_unit_last_stride("gate_up", gate_up)
    num_tokens, width = gate_up.shape
    if width % 2 != 0:
        raise ValueError(f"gate_up: last dimension must be even (gate and up halves), got {width}")
    intermediate_size = width // 2
    output = torch.empty((num_tokens, intermediate_size), dtype=gate_up.dtype, device=gate_up.device)
    if num_tokens == 0 or intermediate_size == 0:
        return output
    grid = (num_tokens, triton.cdiv(intermediate_size, BLOCK_COLUMNS))
    _silu_and_mul_kernel[grid](
        gate_up, output, intermediate_size, gate_up.stride(0), output.stride(0), BLOCK=BLOCK_COLUMNS, num_warps=4,
        **pdl_launch_options(gate_up.device),
    )
    return output
