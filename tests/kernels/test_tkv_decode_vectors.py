"""tkv_core.decode_vectors against the codec's packed codes: every decoded value is zero + code * scale rounded
once into the tile's dtype, bit for bit (the attention kernels' error bounds assume it; a float16 product rounded
before the add moves scores enough to fail them); and a tile rearranged by operand_order holds the channels
operand_channels names."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from arbi_grpc.kv_codec.packing import pack_codes
from arbi_grpc.kv_codec.paged_cache import group_metadata_shape, split_group_metadata
from arbi_kernels.tkv_core import code_channels, decode_vectors, load_coded_vectors, operand_channels, operand_order
from arbi_kernels.tkv_layout import metadata_pair_view, packed_code_view, triton_dtype


@triton.jit
def _decode_kernel(codes_ptr, metadata_ptr, out_ptr, kv_head, num_kv_heads, BITS: tl.constexpr,
                   HEAD_DIM: tl.constexpr, GROUP: tl.constexpr, PAGE_SIZE: tl.constexpr, NUM_SLOTS: tl.constexpr,
                   DTYPE: tl.constexpr, OPERAND_ORDER: tl.constexpr):
    slots = tl.arange(0, NUM_SLOTS)
    words, scale, zero = load_coded_vectors(codes_ptr, metadata_ptr, (slots // PAGE_SIZE).to(tl.int64),
                                            slots % PAGE_SIZE, kv_head, num_kv_heads, slots < NUM_SLOTS, BITS,
                                            HEAD_DIM, GROUP, PAGE_SIZE)
    values = decode_vectors(words, scale, zero, BITS, HEAD_DIM, GROUP, DTYPE)
    if OPERAND_ORDER:
        tl.store(out_ptr + slots[:, None] * HEAD_DIM + operand_channels(HEAD_DIM)[None, :], operand_order(values))
    else:
        tl.store(out_ptr + slots[:, None] * HEAD_DIM + code_channels(HEAD_DIM)[None, :], values)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("compute_dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize(("head_dim", "operand_order_tile"), [(64, False), (64, True), (128, True), (16, True)])
def test_decoded_values_round_once(bits, compute_dtype, head_dim, operand_order_tile, device, generator):
    """Head 1 of a two-head pool, read through the paged layout (the other head holds other codes and metadata);
    operand_order_tile: the tile rearranged for the MMAs and stored at operand_channels (D=16 keeps code order)."""
    num_blocks, page_size, num_kv_heads, group = 8, 8, 2, 16
    slots = (num_blocks, page_size, num_kv_heads)
    codes = torch.randint(0, 1 << bits, (*slots, head_dim), generator=generator)
    # zeros in [-2^bits * scale, 0], as a group spanning 0 has: zero + code * scale cancels
    scale = (0.01 + 0.2 * torch.rand((*slots, head_dim // group), generator=generator)).half()
    zero = (-scale.float() * (1 << bits) * torch.rand(scale.shape, generator=generator)).half()
    metadata = torch.empty(group_metadata_shape(num_blocks, page_size, num_kv_heads, head_dim // group),
                           dtype=torch.float16)
    for view, part in zip(split_group_metadata(metadata), (scale, zero)):
        view.copy_(part)
    head = (slice(None), slice(None), 1)  # [blocks, page, Hkv, ..] -> head 1 of every slot
    expected = (zero[head].double().repeat_interleave(group, -1)
                + codes[head].double() * scale[head].double().repeat_interleave(group, -1)).flatten(0, 1)
    packed = packed_code_view(pack_codes(codes.to(torch.uint8), bits).to(device), bits)
    actual = torch.empty((num_blocks * page_size, head_dim), dtype=compute_dtype, device=device)
    _decode_kernel[(1,)](packed, metadata_pair_view(metadata.to(device)), actual, 1, num_kv_heads, BITS=bits, HEAD_DIM=head_dim,
                         GROUP=group, PAGE_SIZE=page_size, NUM_SLOTS=num_blocks * page_size,
                         DTYPE=triton_dtype(compute_dtype), OPERAND_ORDER=operand_order_tile)
    assert torch.equal(actual.cpu(), expected.to(compute_dtype))
