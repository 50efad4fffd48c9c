"""Dense bit packing: exact round trips for every width and the documented LSB-first stream layout."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec import SUPPORTED_BITS, pack_codes, packed_width, unpack_codes


@pytest.mark.parametrize("bits", SUPPORTED_BITS)
@pytest.mark.parametrize("shape", [(8,), (5, 64), (2, 3, 128), (7, 3, 40)])
def test_pack_unpack_round_trip(bits: int, shape: tuple[int, ...], generator: torch.Generator) -> None:
    codes = torch.randint(0, 1 << bits, shape, generator=generator).to(torch.uint8)
    packed = pack_codes(codes, bits)
    assert packed.dtype == torch.uint8
    assert packed.shape == (*shape[:-1], shape[-1] * bits // 8)
    assert torch.equal(unpack_codes(packed, bits), codes)


@pytest.mark.parametrize("bits", SUPPORTED_BITS)
def test_layout_is_little_endian_bit_stream(bits: int, generator: torch.Generator) -> None:
    codes = torch.randint(0, 1 << bits, (16,), generator=generator).to(torch.uint8)
    stream = "".join(format(int(code), f"0{bits}b")[::-1] for code in codes)  # LSB-first per code
    expected = [int(stream[i : i + 8][::-1], 2) for i in range(0, len(stream), 8)]
    assert pack_codes(codes, bits).tolist() == expected


def test_eight_three_bit_codes_fill_three_bytes() -> None:
    codes = torch.tensor([7, 0, 7, 0, 7, 0, 7, 0], dtype=torch.uint8)
    # bits: 111 000 111 000 111 000 111 000 (LSB first) -> bytes 0b11000111, 0b01110001, 0b00011100
    assert pack_codes(codes, 3).tolist() == [0b11000111, 0b01110001, 0b00011100]


def test_packed_width_and_refusals() -> None:
    assert packed_width(64, 3) == 24
    with pytest.raises(InvalidArgumentError):
        packed_width(12, 4)
    with pytest.raises(InvalidArgumentError):
        pack_codes(torch.zeros(8, dtype=torch.uint8), 7)
    with pytest.raises(InvalidArgumentError):
        unpack_codes(torch.zeros(3, dtype=torch.int32), 4)
    with pytest.raises(InvalidArgumentError):
        unpack_codes(torch.zeros(2, dtype=torch.uint8), 3)
