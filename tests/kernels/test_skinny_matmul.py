"""Skinny matmul (decode projections, M <= 16) against the torch reference, and its tile choice."""

from __future__ import annotations

import pytest
import torch

from arbi_kernels.skinny_matmul import (
    MAX_SPLIT_K,
    MIN_ITERATIONS_PER_SPLIT,
    PROGRAMS_PER_SM,
    TUNED_TILES,
    SkinnyTiles,
    choose_skinny_tiles,
    heuristic_tiles,
    row_bucket,
    skinny_matmul,
)
from tests.kernels.paged_batches import tolerance
from tests.kernels.reference import skinny_matmul_reference

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TILES = [
    SkinnyTiles(block_n=16, block_k=32),
    SkinnyTiles(block_n=4, block_k=64, split_k=3, num_warps=2),
    SkinnyTiles(block_n=16, block_k=32, use_dot=True),
    SkinnyTiles(block_n=32, block_k=16, split_k=4, use_dot=True),
]


def _operands(num_rows, n, k, dtype, device, generator, with_bias=True):
    """Weights scaled by 1/sqrt(K) so outputs are O(1) and tolerances mean the same at every K."""
    x = torch.randn((num_rows, k), generator=generator).to(device=device, dtype=dtype)
    weight = (torch.randn((n, k), generator=generator) / k**0.5).to(device=device, dtype=dtype)
    bias = torch.randn((n,), generator=generator).to(device=device, dtype=dtype) if with_bias else None
    return x, weight, bias


def _skip_interpreted_bf16_dot(tiles: SkinnyTiles, dtype: torch.dtype, interpreting: bool) -> None:
    if interpreting and tiles.use_dot and dtype == torch.bfloat16:
        pytest.skip("the interpreter's bf16 tl.dot is wrong (triton-lang/triton#11584); tested on the GPU")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tiles", TILES, ids=lambda tiles: tiles.label)
@pytest.mark.parametrize(("num_rows", "n", "k"), [(1, 48, 256), (1, 20, 200), (3, 50, 200), (16, 33, 96)])
def test_matches_reference(dtype, tiles, num_rows, n, k, device, generator, interpreting):
    """Even and ragged K (masked tail tile), N not a multiple of the row block, splits that do not divide K."""
    _skip_interpreted_bf16_dot(tiles, dtype, interpreting)
    x, weight, bias = _operands(num_rows, n, k, dtype, device, generator)
    torch.testing.assert_close(
        skinny_matmul(x, weight, bias, tiles=tiles), skinny_matmul_reference(x, weight, bias), **tolerance(dtype)
    )


@pytest.mark.parametrize("split_k", [1, 2])
def test_without_bias(split_k, device, generator):
    x, weight, _ = _operands(5, 40, 128, torch.float32, device, generator, with_bias=False)
    tiles = SkinnyTiles(block_n=8, block_k=32, split_k=split_k)
    torch.testing.assert_close(skinny_matmul(x, weight, tiles=tiles), skinny_matmul_reference(x, weight))


@pytest.mark.parametrize("num_rows", [1, 2, 7, 16])
def test_default_tiles(num_rows, device, generator):
    x, weight, bias = _operands(num_rows, 72, 160, torch.float16, device, generator)
    torch.testing.assert_close(skinny_matmul(x, weight, bias), skinny_matmul_reference(x, weight, bias),
                               **tolerance(torch.float16))


def test_strided_rows_and_float32_bias(device, generator):
    """x as rows of a wider buffer (row stride > K) and a float32 bias on a float16 matmul."""
    buffer = torch.randn((4, 300), generator=generator).to(device=device, dtype=torch.float16)
    x = buffer[:, 20:148]
    weight = (torch.randn((24, 128), generator=generator) / 128**0.5).to(device=device, dtype=torch.float16)
    bias = torch.randn((24,), generator=generator).to(device)
    tiles = SkinnyTiles(block_n=8, block_k=32, split_k=2)
    torch.testing.assert_close(skinny_matmul(x, weight, bias, tiles=tiles), skinny_matmul_reference(x, weight, bias),
                               **tolerance(torch.float16))


def test_empty_shapes(device):
    weight = torch.ones((6, 4), device=device)
    assert skinny_matmul(torch.ones((0, 4), device=device), weight).shape == (0, 6)
    bias = torch.arange(3.0, device=device)
    empty_k = skinny_matmul(torch.ones((2, 0), device=device), torch.ones((3, 0), device=device), bias)
    torch.testing.assert_close(empty_k, bias.expand(2, 3))


@pytest.mark.parametrize(("num_rows", "bucket"), [(1, 1), (2, 2), (3, 4), (5, 8), (8, 8), (9, 16), (16, 16)])
def test_row_bucket(num_rows, bucket):
    assert row_bucket(num_rows) == bucket


@pytest.mark.parametrize("num_rows", [1, 8])
@pytest.mark.parametrize(
    ("k", "n"),
    [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096), (4096, 128256),
     (1024, 4096), (2048, 1024), (1024, 6144), (3072, 1024), (1024, 151936)],
)
@pytest.mark.parametrize("element_size", [2, 4])
def test_heuristic_fills_the_gpu_or_stops_at_a_limit(element_size, num_rows, k, n):
    num_sms = 132
    tiles = heuristic_tiles(num_rows, n, k, element_size, num_sms)
    assert tiles.block_k * element_size == 512
    programs = -(-n // tiles.block_n) * tiles.split_k
    one_more_split_too_short = k // (2 * tiles.split_k * tiles.block_k) < MIN_ITERATIONS_PER_SPLIT
    assert programs >= PROGRAMS_PER_SM * num_sms or tiles.split_k == MAX_SPLIT_K or one_more_split_too_short
    assert k // (tiles.split_k * tiles.block_k) >= MIN_ITERATIONS_PER_SPLIT or tiles.split_k == 1
    assert tiles.use_dot == (num_rows > 4)


def test_tuned_table_wins_over_the_heuristic(monkeypatch, device, generator):
    tuned = SkinnyTiles(block_n=8, block_k=64, split_k=2, num_warps=2, num_stages=2)
    monkeypatch.setitem(TUNED_TILES, (4, 40, 256), tuned)
    assert choose_skinny_tiles(3, 40, 256, torch.float16, torch.device("cpu")) == tuned
    assert choose_skinny_tiles(5, 40, 256, torch.float16, torch.device("cpu")) != tuned  # bucket 8: not tuned
    assert choose_skinny_tiles(3, 40, 256, torch.float32, torch.device("cpu")) != tuned  # tuned for 16-bit only
    x, weight, bias = _operands(3, 40, 256, torch.float16, device, generator)
    torch.testing.assert_close(skinny_matmul(x, weight, bias), skinny_matmul_reference(x, weight, bias),
                               **tolerance(torch.float16))


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"x": torch.zeros(17, 8)}, NotImplementedError, "at most 16 rows, got 17"),
        ({"x": torch.zeros(2, 8, 1)}, ValueError, "x: expected shape"),
        ({"weight": torch.zeros(4, 9)}, ValueError, r"weight: expected shape \[out_features, in_features=8\]"),
        ({"weight": torch.zeros(4, 8, dtype=torch.float16)}, ValueError, "weight: dtype must match x"),
        ({"x": torch.zeros(2, 8, dtype=torch.int32)}, ValueError, "x: dtype must be one of"),
        ({"bias": torch.zeros(5)}, ValueError, r"bias: expected shape \[out_features=4\]"),
        ({"weight": torch.zeros(8, 4).t()}, ValueError, "weight: last dimension must be contiguous"),
    ],
)
def test_rejects_bad_arguments(arguments, error, message):
    defaults = {"x": torch.zeros(2, 8), "weight": torch.zeros(4, 8), "bias": None}
    with pytest.raises(error, match=message):
        skinny_matmul(**(defaults | arguments))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"block_n": 12}, "block_n: must be a power of two >= 1"),
        ({"block_n": 8, "use_dot": True}, "block_n: must be a power of two >= 16"),
        ({"block_k": 8}, "block_k: must be a power of two >= 16"),
        ({"split_k": 0}, "split_k: must be in 1..256"),
        ({"num_warps": 3}, "num_warps"),
        ({"num_stages": 0}, "num_stages"),
    ],
)
def test_tiles_reject_bad_fields(fields, message):
    with pytest.raises(ValueError, match=message):
        SkinnyTiles(**({"block_n": 16, "block_k": 64} | fields))
