"""Skinny matmul, compiled, at the decode projections of Llama-3-8B and Qwen3-0.6B, against torch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from arbi_kernels.skinny_matmul import SkinnyTiles, skinny_matmul
from tests.kernels.paged_batches import tolerance
from tests.kernels.reference import skinny_matmul_reference

# (in_features K, out_features N) of every projection.
LLAMA3_8B_SHAPES = [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096), (4096, 128256)]
QWEN3_0_6B_SHAPES = [(1024, 4096), (2048, 1024), (1024, 6144), (3072, 1024), (1024, 151936)]
ROWS = [1, 2, 4, 8, 16]


def _operands(num_rows, n, k, dtype, generator):
    """Weights scaled by 1/sqrt(K) so outputs are O(1) and tolerances mean the same at every K."""
    x = torch.randn((num_rows, k), generator=generator, device="cuda").to(dtype)
    weight = (torch.randn((n, k), generator=generator, device="cuda") / k**0.5).to(dtype)
    return x, weight


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("num_rows", ROWS)
@pytest.mark.parametrize(("k", "n"), LLAMA3_8B_SHAPES + QWEN3_0_6B_SHAPES)
def test_matches_torch(k, n, num_rows, dtype, generator):
    """The default tiles (tuned or heuristic) against the float32 reference and against F.linear."""
    x, weight = _operands(num_rows, n, k, dtype, generator)
    actual = skinny_matmul(x, weight)
    torch.testing.assert_close(actual, skinny_matmul_reference(x, weight), **tolerance(dtype))
    torch.testing.assert_close(actual, F.linear(x, weight), **tolerance(dtype))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize(
    "tiles",
    [
        SkinnyTiles(block_n=8, block_k=512, split_k=4),
        SkinnyTiles(block_n=32, block_k=256, num_warps=8, num_stages=1),
        SkinnyTiles(block_n=16, block_k=256, split_k=8, use_dot=True, num_stages=4),
        SkinnyTiles(block_n=64, block_k=128, use_dot=True, num_warps=8),
    ],
    ids=lambda tiles: tiles.label,
)
@pytest.mark.parametrize("num_rows", [1, 5, 16])
def test_both_inner_products_with_bias(num_rows, tiles, dtype, generator):
    """Both paths, with and without split-K, on Qwen3's o_proj with a bias, in every dtype."""
    x, weight = _operands(num_rows, 1024, 2048, dtype, generator)
    bias = torch.randn((1024,), generator=generator, device="cuda").to(dtype)
    torch.testing.assert_close(skinny_matmul(x, weight, bias, tiles=tiles), skinny_matmul_reference(x, weight, bias),
                               **tolerance(dtype))


def test_replays_in_a_cuda_graph(generator):
    """Split-K (partials buffer and reduce kernel) captured once, replayed on new inputs in the same buffer."""
    x, weight = _operands(1, 4096, 14336, torch.bfloat16, generator)
    tiles = SkinnyTiles(block_n=16, block_k=256, split_k=4)
    skinny_matmul(x, weight, tiles=tiles)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = skinny_matmul(x, weight, tiles=tiles)
    for _ in range(3):
        x.copy_(torch.randn(x.shape, generator=generator, device="cuda"))
        graph.replay()
        torch.testing.assert_close(captured, skinny_matmul_reference(x, weight), **tolerance(torch.bfloat16))
