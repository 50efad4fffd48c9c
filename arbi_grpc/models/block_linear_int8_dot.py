"""The integer CPU product of block-quantized weights: y = x @ w.T for a `BlockLinear`'s stored blocks (GGUF's Q4_1
or Q8_0) with x quantized to int8 per 32-column block, each block multiplied in integers
(`csrc/block_linear_int8_dot.cpp`, built on first use by `cpu_extensions`).

What it computes, per row x of the input and 32-column block g (float32 operations unless said otherwise):
- the activations: d_x = max |x_j| / 127, q_x,j = round-half-even(x_j * (1 / d_x)), an int8 in -127..127 (all 0 when
  d_x is 0), and s_x = d_x * sum_j q_x,j;
- the output: y_n = sum_g d_w d_x dot(q_w, q_x) (+ m_w s_x for Q4_1, whose weight is d_w q_w + m_w; Q8_0's is d_w q_w),
  each dot exact in int32, d_w d_x rounded to float32, the blocks summed in order by float32 fma (a row's output does
  not depend on its batch, and the AVX2 and plain C++ paths agree bit for bit).
Its error against the float32 product with the dequantized weight is, per output, at most
sum_g (d_x,g / 2) sum_j |w_gj| (each activation moves by at most half its step) plus the float32 rounding, at most
(2 K / 32 + 2) 2^-24 sum_g (|d_w d_x| sum_j |q_w,j q_x,j| + |m_w s_x|).
It is not `BlockLinear`'s exact product: a model runs it where `--cpu-activations int8` asks
(`CausalLM.multiply_blocks_in_integers`, at load).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from arbi_grpc.cpu_extensions import load_cpu_extension
from arbi_grpc.models.block_linear import BlockLinear

_SOURCE = Path(__file__).with_name("csrc") / "block_linear_int8_dot.cpp"


def int8_dot_kernels():
    """`torch.ops.arbi_block_linear_int8_dot` (quantize_activations, q4_linear, q8_linear), built on first use."""
    return load_cpu_extension(_SOURCE)


def quantize_activations(states: Tensor, kind: str, vectorised: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """(q_x int8 [T, K], d_x float32 [T, K / 32], s_x float32 [T, K / 32]) of states [T, K] float32, each block's codes
    in the order the `kind` ("q4" or "q8") weight's codes are held: for q4 its even columns, then its odd ones."""
    return int8_dot_kernels().quantize_activations(states, kind == "q4", vectorised)


class Int8DotLinear(nn.Module):
    """y = x @ w.T (+ bias) of a `BlockLinear`'s blocks (shared, not copied), through the integer product above;
    x [T, K] of any float dtype, y in x's dtype."""

    def __init__(self, linear: BlockLinear) -> None:
        super().__init__()
        self.blocks = linear  # its codes, scales, minimums and bias: held (and counted) once
        self.kernels = int8_dot_kernels()

    def product(self, states: Tensor, vectorised: bool = True) -> Tensor:
        """x @ w.T float32 for x [T, K] float32 (`vectorised`: AVX2 where the CPU has it, else plain C++)."""
        blocks = self.blocks
        if blocks.kind == "q4":
            return self.kernels.q4_linear(states, blocks.codes, blocks.scale, blocks.minimum, vectorised)
        return self.kernels.q8_linear(states, blocks.codes, blocks.scale, vectorised)

    def forward(self, states: Tensor) -> Tensor:
        out = self.product(states.to(torch.float32).contiguous()).to(states.dtype)
        return out if self.blocks.bias is None else out.add_(self.blocks.bias)
