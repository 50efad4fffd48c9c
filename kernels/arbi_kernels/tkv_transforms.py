"""The two TKV attention transforms, one Triton launch each: the query into the key code space, q' = (H q) / s_k,
and the attention output back to model space, o = H (acc / s_v + m_v).

They compute bit for bit what arbi_grpc.kv_codec.attention_transforms computes in torch (the same butterfly,
IEEE division, the same rounding at the end), where the torch version takes about 25 small launches each; a
decode step pays both in every layer. One program transforms ROWS_PER_PROGRAM (token, query head) rows.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from arbi_kernels.checks import (
    FLOAT_DTYPES,
    require_dtype,
    require_same_device,
    require_shape,
    require_unit_last_stride,
)
from arbi_kernels.tkv_core import hadamard_rows
from arbi_kernels.tkv_layout import TkvLayerTensors, validate_tkv_layer

ROWS_PER_PROGRAM = 16


@triton.jit(do_not_specialize=["num_rows", "num_heads", "group_size"])
def _transform_rows_kernel(
    x_ptr, out_ptr, channel_scale_ptr, shift_ptr, num_rows, num_heads, group_size,
    stride_x_token, stride_x_head, stride_out_token, stride_out_head,
    INTO_CODE_SPACE: tl.constexpr, ROTATE: tl.constexpr, HEAD_DIM: tl.constexpr, LOG2_HEAD_DIM: tl.constexpr,
    BLOCK_R: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    valid = (rows < num_rows)[:, None]
    tokens = (rows // num_heads).to(tl.int64)
    heads = rows % num_heads
    dims = tl.arange(0, HEAD_DIM)
    x = tl.load(x_ptr + tokens[:, None] * stride_x_token + heads[:, None] * stride_x_head + dims[None, :],
                mask=valid, other=0.0).to(tl.float32)  # [BLOCK_R, D]
    channels = (heads // group_size)[:, None] * HEAD_DIM + dims[None, :]  # the row's kv head's channels
    channel_scale = tl.load(channel_scale_ptr + channels, mask=valid, other=1.0)
    if INTO_CODE_SPACE:  # q' = (H q) / s_k
        if ROTATE:
            x = hadamard_rows(x, BLOCK_R, HEAD_DIM, LOG2_HEAD_DIM)
        x = tl.math.div_rn(x, channel_scale)
    else:  # o = H (acc / s_v + m_v)
        x = tl.math.div_rn(x, channel_scale) + tl.load(shift_ptr + channels, mask=valid, other=0.0)
        if ROTATE:
            x = hadamard_rows(x, BLOCK_R, HEAD_DIM, LOG2_HEAD_DIM)
    out_ptrs = out_ptr + tokens[:, None] * stride_out_token + heads[:, None] * stride_out_head + dims[None, :]
    tl.store(out_ptrs, x.to(out_ptr.dtype.element_ty), mask=valid)


def _transform(x: torch.Tensor, layer: TkvLayerTensors, into_code_space: bool, dtype: torch.dtype) -> torch.Tensor:
    _, _, num_kv_heads, head_dim = validate_tkv_layer(layer)
    name = "query" if into_code_space else "accumulated"
    require_dtype(name, x, FLOAT_DTYPES)
    require_shape(name, x, {"num_tokens": None, "num_heads": None, "head_dim": head_dim})
    require_unit_last_stride(name, x)
    require_same_device({name: x, "layer": layer.key_codes})
    num_tokens, num_heads, _ = x.shape
    if num_heads % num_kv_heads:
        raise ValueError(f"{name}: num_heads {num_heads} must be a multiple of num_kv_heads {num_kv_heads}")
    output = torch.empty((num_tokens, num_heads, head_dim), dtype=dtype, device=x.device)
    num_rows = num_tokens * num_heads
    if num_rows == 0:
        return output
    channel_scale = layer.key_channel_scale if into_code_space else layer.value_channel_scale
    _transform_rows_kernel[(triton.cdiv(num_rows, ROWS_PER_PROGRAM),)](
        x, output, channel_scale, layer.value_shift, num_rows, num_heads, num_heads // num_kv_heads,
        x.stride(0), x.stride(1), output.stride(0), output.stride(1),
        INTO_CODE_SPACE=into_code_space, ROTATE=bool(layer.rotate), HEAD_DIM=head_dim,
        LOG2_HEAD_DIM=head_dim.bit_length() - 1, BLOCK_R=ROWS_PER_PROGRAM, num_warps=4,
    )
    return output


def tkv_transform_queries(query: torch.Tensor, layer: TkvLayerTensors) -> torch.Tensor:
    """q' = (H q) / s_k: query [T, Hq, D] in model space -> float32 [T, Hq, D] scored against decoded key codes."""
    return _transform(query, layer, into_code_space=True, dtype=torch.float32)


def tkv_transform_output(accumulated: torch.Tensor, layer: TkvLayerTensors, dtype: torch.dtype) -> torch.Tensor:
    """o = H (acc / s_v + m_v): attention output [T, Hq, D] in the value code space -> model space, `dtype`."""
    require_dtype("dtype", torch.empty(0, dtype=dtype), FLOAT_DTYPES)
    return _transform(accumulated, layer, into_code_space=False, dtype=dtype)
