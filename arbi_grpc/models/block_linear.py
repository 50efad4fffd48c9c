"""The CPU kernel of block-quantized weights (`quantized_weights.QuantizedWeight`, GGUF's Q4_0 / Q4_1 / Q8_0 as
stored): y = x @ w.T in float32 from the codes, scales and minimums themselves.

The scales and minimums are held as float16, GGUF's own precision (exactly the stored float32 values).
`csrc/block_linear.cpp` holds the kernel, built on first use (`cpu_extensions`; about 15 s).
Up to `SMALL_BATCH` rows it reads the codes directly (AVX2 + FMA where the CPU has them): each weight is decoded to
the float32 value `QuantizedWeight.dequantize()` gives, in registers for a single row, and for more rows once per
call into a small per-thread buffer that is multiplied by blocks of 4 rows; either way every output is the same
sequence of float32 operations, so a row's output does not depend on its batch. Above, the weight is dequantized
in chunks of rows (`quantized_layout.DEQUANTIZE_CHUNK_BYTES` of float32 each) multiplied by torch's float32
matmul. Both equal the float32 product with `QuantizedWeight.dequantize()` up to float32 accumulation order.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arbi_grpc.cpu_extensions import load_cpu_extension
from arbi_grpc.models.quantized_layout import SMALL_BATCH, dequantize_chunk_rows
from arbi_grpc.models.quantized_weights import QuantizedWeight

_SOURCE = Path(__file__).with_name("csrc") / "block_linear.cpp"


class BlockLinear(nn.Module):
    """y = x @ w.T (+ bias) for a block-quantized w [N, K]; x [T, K] of any float dtype, y in x's dtype."""

    def __init__(self, weight: QuantizedWeight, bias: Tensor | None) -> None:
        super().__init__()
        self.kind = weight.kind
        self.out_features = weight.shape[0]
        self.register_buffer("codes", weight.codes)
        self.register_buffer("scale", _float16(weight.scale, "scale"))
        self.register_buffer("minimum", None if weight.minimum is None else _float16(weight.minimum, "minimum"))
        self.register_buffer("bias", bias)
        self.kernels = load_cpu_extension(_SOURCE)
        self._q4_linear, self._q8_linear = self.kernels.q4_linear.default, self.kernels.q8_linear.default
        self.chunk_rows = dequantize_chunk_rows(self.out_features, weight.shape[1])

    def dequantize(self, vectorised: bool = True, rows: slice = slice(None)) -> Tensor:
        """w[rows] [n, K] float32, equal to `QuantizedWeight.dequantize()`'s (`vectorised`: AVX2 where the CPU has
        it)."""
        codes, scale = self.codes[rows], self.scale[rows]
        if self.kind == "q4":
            return self.kernels.q4_dequantize(codes, scale, self.minimum[rows], vectorised)
        return self.kernels.q8_dequantize(codes, scale, vectorised)

    def rows(self, indices: Tensor) -> Tensor:
        """w[indices] [T, K] float32: an embedding lookup in the quantized table, equal to the dequantized one's."""
        codes, scale = self.codes.index_select(0, indices), self.scale.index_select(0, indices)
        if self.kind == "q4":
            return self.kernels.q4_dequantize(codes, scale, self.minimum.index_select(0, indices), True)
        return self.kernels.q8_dequantize(codes, scale, True)

    def forward(self, states: Tensor) -> Tensor:
        # The buffers are read from their dict at once: a decode step makes over a hundred of these calls, and
        # each attribute lookup of a buffer goes through nn.Module.__getattr__.
        buffers = self._buffers
        widened = states.dtype != torch.float32
        inputs = states.float().contiguous() if widened else states.contiguous()
        if inputs.shape[0] > SMALL_BATCH:
            out = self._chunked_product(inputs)
        elif self.kind == "q4":
            out = self._q4_linear(inputs, buffers["codes"], buffers["scale"], buffers["minimum"], True)
        else:
            out = self._q8_linear(inputs, buffers["codes"], buffers["scale"], True)
        if widened:
            out = out.to(states.dtype)
        bias = buffers["bias"]
        return out if bias is None else out.add_(bias)

    def _chunked_product(self, inputs: Tensor) -> Tensor:
        """inputs @ w.T through dequantized chunks of `chunk_rows` of w's rows (one chunk holds all of most
        layers' matrices)."""
        if self.chunk_rows >= self.out_features:
            return F.linear(inputs, self.dequantize())
        out = inputs.new_empty(inputs.shape[0], self.out_features)
        for start in range(0, self.out_features, self.chunk_rows):
            rows = slice(start, start + self.chunk_rows)
            out[:, rows] = F.linear(inputs, self.dequantize(rows=rows))
        return out


def _float16(values: Tensor, name: str) -> Tensor:
    """`values` as float16, which holds them exactly (GGUF stores a block's d and m so)."""
    held = values.to(torch.float16)
    if not torch.equal(held.float(), values):
        raise ValueError(f"BlockLinear: a block {name} is not a float16 value (GGUF's blocks hold float16 ones)")
    return held


class BlockEmbedding(nn.Module):
    """The token embedding read from a block-quantized table (a `BlockLinear`, shared with the output projection
    when the two are tied): ids [T] -> [T, K] float32, the dequantized table's rows."""

    def __init__(self, table: BlockLinear) -> None:
        super().__init__()
        self.table = table

    def forward(self, input_ids: Tensor) -> Tensor:
        return self.table.rows(input_ids)
