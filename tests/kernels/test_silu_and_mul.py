"""SiLU-and-multiply against the torch reference."""

from __future__ import annotations

import pytest
import torch

from arbi_kernels import silu_and_mul
from tests.kernels.paged_batches import tolerance
from tests.kernels.reference import silu_and_mul_reference


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("intermediate_size", [1, 1536, 2500])
def test_matches_reference(dtype, intermediate_size, device, generator):
    num_tokens = int(torch.randint(1, 12, (1,), generator=generator))
    gate_up = (4 * torch.randn((num_tokens, 2 * intermediate_size), generator=generator)).to(device=device, dtype=dtype)
    torch.testing.assert_close(silu_and_mul(gate_up), silu_and_mul_reference(gate_up), **tolerance(dtype))


def test_gate_is_the_first_half(device):
    gate_up = torch.tensor([[0.0, 10.0, 3.0, 5.0]], device=device)  # gate [0, 10], up [3, 5]
    output = silu_and_mul(gate_up)
    torch.testing.assert_close(output, torch.tensor([[0.0, 5.0 * 10.0 / (1.0 + torch.exp(torch.tensor(-10.0)).item())]],
                                                    device=device))


def test_strided_rows(device, generator):
    buffer = torch.randn((4, 3000), generator=generator).to(device)
    gate_up = buffer[:, :2000]
    torch.testing.assert_close(silu_and_mul(gate_up), silu_and_mul_reference(gate_up), **tolerance(torch.float32))


@pytest.mark.parametrize(
    ("gate_up", "message"),
    [
        (torch.zeros(3, 5), "last dimension must be even"),
        (torch.zeros(3, 4, dtype=torch.int64), "gate_up: dtype"),
        (torch.zeros(12), "gate_up: expected shape"),
        (torch.zeros(4, 3).t(), "last dimension must be contiguous"),
    ],
)
def test_rejects_bad_arguments(gate_up, message):
    with pytest.raises(ValueError, match=message):
        silu_and_mul(gate_up)
