"""The normalized (block) Walsh-Hadamard rotation: orthonormal, symmetric, self-inverse."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec import hadamard_matrix, hadamard_rotate, rotation_block_size


def _sylvester(size: int) -> torch.Tensor:
    matrix = torch.ones(1, 1)
    while matrix.shape[0] < size:
        matrix = torch.cat([torch.cat([matrix, matrix], 1), torch.cat([matrix, -matrix], 1)], 0)
    return matrix / size**0.5


@pytest.mark.parametrize("head_dim", [8, 64, 128, 256])
def test_matches_sylvester_hadamard(head_dim: int) -> None:
    assert torch.allclose(hadamard_matrix(head_dim), _sylvester(head_dim), atol=1e-6)


@pytest.mark.parametrize("head_dim", [16, 64, 96, 80])
def test_orthonormal_and_self_inverse(head_dim: int, generator: torch.Generator) -> None:
    matrix = hadamard_matrix(head_dim)
    assert torch.allclose(matrix @ matrix.T, torch.eye(head_dim), atol=1e-5)
    assert torch.allclose(matrix, matrix.T)
    x = torch.randn(5, 3, head_dim, generator=generator)
    rotated = hadamard_rotate(x)
    assert torch.allclose(hadamard_rotate(rotated), x, atol=1e-5)
    assert torch.allclose(rotated.norm(dim=-1), x.norm(dim=-1), rtol=1e-5)
    assert torch.allclose(rotated, x @ matrix.T, atol=1e-5)


def test_block_rotation_for_non_power_of_two() -> None:
    assert rotation_block_size(96) == 32
    assert rotation_block_size(80) == 16
    matrix = hadamard_matrix(96)
    assert torch.count_nonzero(matrix[:32, 32:]) == 0  # block diagonal
    assert torch.allclose(matrix[32:64, 32:64], _sylvester(32), atol=1e-6)


def test_spreads_an_outlier_evenly() -> None:
    x = torch.zeros(64)
    x[7] = 8.0
    assert torch.allclose(hadamard_rotate(x).abs(), torch.full((64,), 1.0))


@pytest.mark.parametrize("head_dim", [12, 20, 7])
def test_head_dims_without_a_block_of_eight_are_refused(head_dim: int) -> None:
    with pytest.raises(NotImplementedError, match=f"head_dim {head_dim}"):
        hadamard_rotate(torch.zeros(2, head_dim))


def test_non_positive_head_dim_is_invalid() -> None:
    with pytest.raises(InvalidArgumentError):
        rotation_block_size(0)


def test_keeps_dtype(generator: torch.Generator) -> None:
    x = torch.randn(4, 64, generator=generator).half()
    assert hadamard_rotate(x).dtype == torch.float16
