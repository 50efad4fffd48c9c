"""Dense bit packing of quantization codes: n codes of b bits take exactly n*b/8 bytes, for every b in 2..8.

Layout (what fused kernels must read): the codes along the last dim form one little-endian bit stream;
code i occupies stream bits [i*b, (i+1)*b), least significant bit first, and stream bit j lives in byte
j // 8 at bit position j % 8. So 8 codes of 3 bits fill 3 bytes, and a code may straddle two bytes.
For b in {2, 4, 8} this is the usual "first code in the low bits" nibble/crumb layout.
"""

from __future__ import annotations

import torch

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec.spec import validate_bits


def packed_width(num_codes: int, bits: int) -> int:
    """Bytes that `num_codes` codes of `bits` bits pack into; num_codes must be a multiple of 8."""
    if num_codes % 8:
        raise InvalidArgumentError("head_dim", f"TKV packs codes in runs of 8; got {num_codes} codes per row")
    return num_codes * validate_bits(bits) // 8


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack uint8 codes [..., N] (each < 2**bits) into uint8 bytes [..., N*bits/8] along the last dim."""
    width = packed_width(codes.shape[-1], bits)
    bit_positions = torch.arange(bits, device=codes.device, dtype=torch.uint8)
    stream = (codes.unsqueeze(-1) >> bit_positions) & 1  # stream: [..., N, bits], LSB first
    stream = stream.reshape(*codes.shape[:-1], width, 8)  # [..., bytes, 8 bits]
    byte_weights = _powers_of_two(8, codes.device)
    return (stream.to(torch.int32) * byte_weights).sum(dim=-1).to(torch.uint8)


def unpack_codes(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """Invert `pack_codes`: uint8 bytes [..., M] -> uint8 codes [..., M*8/bits]."""
    validate_bits(bits)
    if packed.dtype != torch.uint8:
        raise InvalidArgumentError("packed", f"must be uint8, got {packed.dtype}")
    width = packed.shape[-1]
    if (width * 8) % bits:
        raise InvalidArgumentError("packed", f"{width} bytes do not hold a whole number of {bits}-bit codes")
    bit_positions = torch.arange(8, device=packed.device, dtype=torch.uint8)
    stream = (packed.unsqueeze(-1) >> bit_positions) & 1  # stream: [..., M, 8]
    stream = stream.reshape(*packed.shape[:-1], width * 8 // bits, bits)  # [..., N, bits]
    code_weights = _powers_of_two(bits, packed.device)
    return (stream.to(torch.int32) * code_weights).sum(dim=-1).to(torch.uint8)


def _powers_of_two(count: int, device: torch.device) -> torch.Tensor:
    """int32 [1, 2, 4, ..., 2**(count-1)] made on `device` itself: no host-to-device copy, so a CUDA caller (tail
    seeding before a step) never waits for the host."""
    return torch.ones(count, device=device, dtype=torch.int32) << torch.arange(count, device=device, dtype=torch.int32)
