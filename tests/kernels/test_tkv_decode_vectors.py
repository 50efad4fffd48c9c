"""tkv_core.decode_vectors against the codec's packed codes: every decoded value is zero + code * scale rounded
once into the tile's dtype, bit for bit (the attention kernels' error bounds assume it; a float16 product rounded
before the add moves scores enough to fail them)."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from arbi_grpc.kv_codec.packing import pack_codes
from arbi_kernels.tkv_core import code_channels, decode_vectors, load_coded_vectors
from arbi_kernels.tkv_layout import packed_code_view, triton_dtype


@triton.jit
def _decode_kernel(codes_ptr, scale_ptr, zero_ptr, out_ptr, BITS: tl.constexpr, HEAD_DIM: tl.constexpr,
                   GROUP: tl.constexpr, NUM_VECTORS: tl.constexpr, DTYPE: tl.constexpr):
    vectors = tl.arange(0, NUM_VECTORS)
    words, scale, zero = load_coded_vectors(codes_ptr, scale_ptr, zero_ptr, vectors, vectors < NUM_VECTORS, BITS,
                                            HEAD_DIM, GROUP)
    values = decode_vectors(words, scale, zero, BITS, HEAD_DIM, GROUP, DTYPE)
    tl.store(out_ptr + vectors[:, None] * HEAD_DIM + code_channels(HEAD_DIM)[None, :], values)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("compute_dtype", [torch.float16, torch.float32])
def test_decoded_values_round_once(bits, compute_dtype, device, generator):
    num_vectors, head_dim, group = 64, 64, 16
    codes = torch.randint(0, 1 << bits, (num_vectors, head_dim), generator=generator)
    # zeros in [-2^bits * scale, 0], as a group spanning 0 has: zero + code * scale cancels
    scale = (0.01 + 0.2 * torch.rand((num_vectors, head_dim // group), generator=generator)).half()
    zero = (-scale.float() * (1 << bits) * torch.rand(scale.shape, generator=generator)).half()
    expected = zero.double().repeat_interleave(group, 1) + codes.double() * scale.double().repeat_interleave(group, 1)
    packed = packed_code_view(pack_codes(codes.to(torch.uint8), bits).to(device), bits)
    actual = torch.empty((num_vectors, head_dim), dtype=compute_dtype, device=device)
    _decode_kernel[(1,)](packed, scale.to(device), zero.to(device), actual, BITS=bits, HEAD_DIM=head_dim,
                         GROUP=group, NUM_VECTORS=num_vectors, DTYPE=triton_dtype(compute_dtype))
    assert torch.equal(actual.cpu(), expected.to(compute_dtype))
