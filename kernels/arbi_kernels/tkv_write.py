"""TKV write by slot: encode this step's model-space K and V into the paged code pools (quantize on write).

Per head vector, as arbi_grpc.kv_codec encodes it: Hadamard rotation (tkv_core.hadamard_rows), the calibrated
channel transform (y - m) * s, then per group of G channels the codec's quantize_groups: an fp16 zero rounded
down from the minimum and an fp16 step rounded up from (max - zero) / (2^bits - 1) (at least SMALLEST_STEP),
codes round((z - zero) / step) half to even, then REFIT_ROUNDS least-squares refits kept where they lower the
group's squared error; codes densely packed. Every rounding is torch's (IEEE division, no FMA contraction);
only the order of the refit's sums differs, so a near-tie can rarely pick the other, equally good, encoding.
Positions below `sink_tokens` also store z itself (fp16) in the sink pool, and every kept token stores it in the
step's exact buffers that the wrapper returns (attention reads a query's exact window from them, store_tkv_tail
keeps the last blocks'). One program encodes BLOCK_T tokens of one kv head, keys or values; a negative slot
(padding) is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from arbi_kernels.checks import (
    require_dtype,
    require_num_warps,
    require_same_device,
    require_shape,
    require_tile_size,
    require_unit_last_stride,
)
from arbi_kernels.tkv_core import hadamard_rows
from arbi_kernels.tkv_layout import TkvLayerTensors, code_words, validate_tkv_layer

SMALLEST_STEP = tl.constexpr(2.0**-14)
"""Smallest fp16 normal: the floor of a group's step (arbi_grpc.kv_codec.quantize.SMALLEST_STEP)."""
REFIT_ROUNDS = tl.constexpr(2)
"""Least-squares refits of each group's (zero, scale) after the min/max start (arbi_grpc.kv_codec.quantize)."""


@triton.jit
def _round_fp16(values, UP: tl.constexpr):
    """float32 -> float16, moved one ulp up (UP) or down where round-to-nearest went the other way."""
    rounded = values.to(tl.float16)
    bits = rounded.to(tl.int16, bitcast=True)
    if UP:
        wrong_way = rounded.to(tl.float32) < values
        stepped = tl.where(rounded == 0, 1, tl.where(rounded > 0, bits + 1, bits - 1))
    else:
        wrong_way = rounded.to(tl.float32) > values
        stepped = tl.where(rounded == 0, -32767, tl.where(rounded > 0, bits - 1, bits + 1))  # -32767: 0x8001
    return tl.where(wrong_way, stepped.to(tl.int16).to(tl.float16, bitcast=True), rounded)


@triton.jit
def _round_half_even(x):
    """torch.round on float32 (ties to even), from floor alone."""
    floor = tl.floor(x)
    fraction = x - floor
    odd = (floor - 2.0 * tl.floor(floor * 0.5)) == 1.0
    return floor + tl.where((fraction > 0.5) | ((fraction == 0.5) & odd), 1.0, 0.0)


@triton.jit
def _group_metadata(zero, step):
    """fp16 (zero rounded down, step raised to SMALLEST_STEP and rounded up) from float32 [..., D/G] values."""
    return _round_fp16(zero, False), _round_fp16(tl.maximum(step, SMALLEST_STEP), True)


@triton.jit
def _group_codes(groups, zero, scale, TOP_CODE: tl.constexpr):
    """float32 codes [..., D/G, G] of groups under fp16 (zero, scale) [..., D/G]."""
    codes = _round_half_even(tl.math.div_rn(groups - zero.to(tl.float32)[:, :, None],
                                            scale.to(tl.float32)[:, :, None]))
    return tl.minimum(tl.maximum(codes, 0.0), TOP_CODE)


@triton.jit
def _squared_error(groups, codes, zero, scale):
    decoded = zero.to(tl.float32)[:, :, None] + codes * scale.to(tl.float32)[:, :, None]
    return tl.sum((decoded - groups) * (decoded - groups), axis=2)  # [..., D/G]


@triton.jit
def _quantize_groups(groups, BITS: tl.constexpr, GROUP: tl.constexpr):
    """arbi_grpc.kv_codec.quantize_groups on groups [T, D/G, G]: (zero, scale) fp16 [T, D/G], codes float32.

    Min/max start, then REFIT_ROUNDS least-squares refits, each kept only where it lowers the group's squared
    error. The sums run in another order than torch's, so a near-tie may resolve the other way: either
    encoding is as good."""
    top_code: tl.constexpr = (1 << BITS) - 1
    low = tl.min(groups, axis=2)
    zero, scale = _group_metadata(low, tl.math.div_rn(tl.max(groups, axis=2) - _round_fp16(low, False).to(tl.float32),
                                                      tl.full([1], top_code, tl.float32)))
    codes = _group_codes(groups, zero, scale, top_code)
    error = _squared_error(groups, codes, zero, scale)
    value_sum = tl.sum(groups, axis=2)
    for _ in tl.static_range(REFIT_ROUNDS):
        code_sum = tl.sum(codes, axis=2)
        det = GROUP * tl.sum(codes * codes, axis=2) - code_sum * code_sum
        solvable = det > 0
        step = tl.math.div_rn(GROUP * tl.sum(codes * groups, axis=2) - code_sum * value_sum, tl.where(solvable, det, 1.0))
        step = tl.where(solvable, tl.maximum(step, SMALLEST_STEP), scale.to(tl.float32))
        line_zero = tl.where(solvable, tl.math.div_rn(value_sum - step * code_sum, tl.full([1], GROUP, tl.float32)),
                             zero.to(tl.float32))
        new_zero, new_scale = _group_metadata(line_zero, step)
        new_codes = _group_codes(groups, new_zero, new_scale, top_code)
        new_error = _squared_error(groups, new_codes, new_zero, new_scale)
        better = new_error < error
        zero, scale = tl.where(better, new_zero, zero), tl.where(better, new_scale, scale)
        codes = tl.where(better[:, :, None], new_codes, codes)
        error = tl.where(better, new_error, error)
    return zero, scale, codes


@triton.jit
def _encode_head_vectors(
    x_ptr, stride_token, kv_head, stride_head, tokens, keep, slots, positions, num_kv_heads,
    channel_scale_ptr, shift_ptr, codes_ptr, metadata_ptr, sink_ptr, exact_ptr,
    BITS: tl.constexpr, HEAD_DIM: tl.constexpr, GROUP: tl.constexpr, PAGE_SIZE: tl.constexpr,
    SINK_TOKENS: tl.constexpr, ROTATE: tl.constexpr, LOG2_HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr,
):
    dims = tl.arange(0, HEAD_DIM)
    x = tl.load(x_ptr + tokens.to(tl.int64)[:, None] * stride_token + kv_head * stride_head + dims[None, :],
                mask=keep[:, None], other=0.0).to(tl.float32)  # [BLOCK_T, D]
    if ROTATE:
        x = hadamard_rows(x, BLOCK_T, HEAD_DIM, LOG2_HEAD_DIM)
    shift = tl.load(shift_ptr + kv_head * HEAD_DIM + dims)
    channel_scale = tl.load(channel_scale_ptr + kv_head * HEAD_DIM + dims)
    z = (x - shift[None, :]) * channel_scale[None, :]  # the code space
    exact_rows = tokens.to(tl.int64) * num_kv_heads + kv_head
    tl.store(exact_ptr + exact_rows[:, None] * HEAD_DIM + dims[None, :], z.to(tl.float16), mask=keep[:, None])

    groups = tl.reshape(z, [BLOCK_T, HEAD_DIM // GROUP, GROUP])
    zero, scale, codes = _quantize_groups(groups, BITS, GROUP)
    codes = codes.to(tl.int32)  # [BLOCK_T, D/G, G]

    vectors = slots * num_kv_heads + kv_head  # [BLOCK_T] int64
    metadata_rows = (slots // PAGE_SIZE * num_kv_heads + kv_head) * PAGE_SIZE + slots % PAGE_SIZE  # heads outer
    entries = tl.arange(0, 2 * HEAD_DIM // GROUP)
    metadata_offsets = metadata_rows[:, None] * (2 * HEAD_DIM // GROUP) + entries[None, :]
    pairs = tl.reshape(tl.join(scale, zero), [BLOCK_T, 2 * HEAD_DIM // GROUP])  # (scale, zero) of each group
    tl.store(metadata_ptr + metadata_offsets, pairs, mask=keep[:, None])

    word_type: tl.constexpr = tl.int32 if BITS * 8 <= 32 else tl.int64
    octet_codes = tl.reshape(codes, [BLOCK_T, HEAD_DIM // 8, 8]).to(word_type)
    shifts = (tl.arange(0, 8) * BITS).to(word_type)
    words = tl.sum(octet_codes << shifts[None, None, :], axis=2)  # [BLOCK_T, D/8]: disjoint bit fields
    octets = tl.arange(0, HEAD_DIM // 8)
    if BITS == 2 or BITS == 4 or BITS == 8:  # codes_ptr is the pool viewed as int16 / int32 / int64
        word_offsets = vectors[:, None] * (HEAD_DIM // 8) + octets[None, :]
        tl.store(codes_ptr + word_offsets, words.to(codes_ptr.dtype.element_ty), mask=keep[:, None])
    else:
        byte_offsets = vectors[:, None] * (HEAD_DIM * BITS // 8) + octets[None, :] * BITS
        for byte in tl.static_range(BITS):
            tl.store(codes_ptr + byte_offsets + byte, ((words >> (8 * byte)) & 255).to(tl.uint8), mask=keep[:, None])

    if SINK_TOKENS > 0:
        is_sink = keep & (positions < SINK_TOKENS)
        sink_rows = ((slots // PAGE_SIZE) * SINK_TOKENS + positions) * num_kv_heads + kv_head  # block holding p
        tl.store(sink_ptr + sink_rows[:, None] * HEAD_DIM + dims[None, :], z.to(tl.float16), mask=is_sink[:, None])


@triton.jit(do_not_specialize=["num_tokens", "num_kv_heads"])
def _tkv_write_kernel(
    key_ptr, value_ptr, positions_ptr, slot_mapping_ptr,
    key_codes_ptr, key_metadata_ptr, key_sink_ptr, key_channel_scale_ptr, key_shift_ptr, key_exact_ptr,
    value_codes_ptr, value_metadata_ptr, value_sink_ptr, value_channel_scale_ptr, value_shift_ptr,
    value_exact_ptr, num_tokens, num_kv_heads,
    stride_key_token, stride_key_head, stride_value_token, stride_value_head,
    KEY_BITS: tl.constexpr, VALUE_BITS: tl.constexpr, HEAD_DIM: tl.constexpr, GROUP: tl.constexpr,
    PAGE_SIZE: tl.constexpr, SINK_TOKENS: tl.constexpr, ROTATE: tl.constexpr, LOG2_HEAD_DIM: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    """Program (token block, kv head, 0 for keys / 1 for values)."""
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    kv_head = tl.program_id(1)
    in_range = tokens < num_tokens
    slots = tl.load(slot_mapping_ptr + tokens, mask=in_range, other=-1)  # [BLOCK_T] int64
    keep = in_range & (slots >= 0)
    positions = tl.load(positions_ptr + tokens, mask=keep, other=0)
    if tl.program_id(2) == 0:
        _encode_head_vectors(
            key_ptr, stride_key_token, kv_head, stride_key_head, tokens, keep, slots, positions, num_kv_heads,
            key_channel_scale_ptr, key_shift_ptr, key_codes_ptr, key_metadata_ptr, key_sink_ptr,
            key_exact_ptr, KEY_BITS, HEAD_DIM, GROUP, PAGE_SIZE, SINK_TOKENS, ROTATE, LOG2_HEAD_DIM, BLOCK_T,
        )
    else:
        _encode_head_vectors(
            value_ptr, stride_value_token, kv_head, stride_value_head, tokens, keep, slots, positions,
            num_kv_heads, value_channel_scale_ptr, value_shift_ptr, value_codes_ptr, value_metadata_ptr,
            value_sink_ptr, value_exact_ptr, VALUE_BITS, HEAD_DIM, GROUP, PAGE_SIZE, SINK_TOKENS, ROTATE,
            LOG2_HEAD_DIM, BLOCK_T,
        )


@dataclass(frozen=True)
class WriteTiles:
    """Launch shape of the write: tokens per program and warps."""

    block_t: int
    num_warps: int

    def __post_init__(self) -> None:
        require_tile_size("block_t", self.block_t, minimum=1)
        require_num_warps(self.num_warps)


DEFAULT_WRITE_TILES = WriteTiles(block_t=1, num_warps=1)
"""One token and one warp a program, keys and values apart: a program's time is the latency of its chain of
dependent steps (rotation, min/max, refits), so small programs win at every size. H200, K4V4, D=128, 8 kv heads,
CUDA-graph timing (2026-11-29): 4.3 us for 1-32 tokens where 16 tokens over 8 warps took 8.3-8.6 us (and the
former launch, keys and values in one program, 46 us per decode step in the engine's profile); 1.08 ms for
32,768 tokens against 1.89 ms."""


def write_tkv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    positions: torch.Tensor,
    slot_mapping: torch.Tensor,
    layer: TkvLayerTensors,
    tiles: WriteTiles | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode key/value [T, Hkv, D] (model space, after RoPE; fp32, fp16 or bf16) into `layer`'s pools in place;
    returns (key_exact, value_exact): fp16 [T, Hkv, D], each token's code-space z = (H x - m) * s in the natural
    channel order (rows of skipped tokens unspecified), what attention reads for a query's own block.

    positions: [T] int64 sequence positions (those below layer.sink_tokens also fill the sink pool);
    slot_mapping: [T] int64 flat slots (block_id * block_size + offset), negative = skip. Inputs must lie in
    fp16 range after the channel transform. Slots past the pool are not checked (no device sync).
    tiles: None takes DEFAULT_WRITE_TILES (the benchmark compares others).
    """
    _, page_size, num_kv_heads, head_dim = validate_tkv_layer(layer)
    require_dtype("key", key, (torch.float32, torch.float16, torch.bfloat16))
    require_shape("key", key, {"num_tokens": None, "num_kv_heads": num_kv_heads, "head_dim": head_dim})
    require_shape("value", value, dict(zip(("num_tokens", "num_kv_heads", "head_dim"), key.shape)))
    require_dtype("value", value, (key.dtype,))
    for name, tensor in (("key", key), ("value", value), ("positions", positions), ("slot_mapping", slot_mapping)):
        require_unit_last_stride(name, tensor)
    for name, tensor in (("positions", positions), ("slot_mapping", slot_mapping)):
        require_dtype(name, tensor, (torch.int64,))
        require_shape(name, tensor, {"num_tokens": key.shape[0]})
    require_same_device({"key": key, "value": value, "positions": positions, "slot_mapping": slot_mapping,
                         "layer": layer.key_codes})
    num_tokens = key.shape[0]
    key_exact = torch.empty((num_tokens, num_kv_heads, head_dim), dtype=torch.float16, device=key.device)
    value_exact = torch.empty_like(key_exact)
    if num_tokens == 0:
        return key_exact, value_exact
    tiles = tiles or DEFAULT_WRITE_TILES
    _tkv_write_kernel[(triton.cdiv(num_tokens, tiles.block_t), num_kv_heads, 2)](
        key, value, positions, slot_mapping,
        code_words(layer.key_codes, layer.key_bits), layer.key_metadata, layer.key_sink,
        layer.key_channel_scale, layer.key_shift, key_exact,
        code_words(layer.value_codes, layer.value_bits), layer.value_metadata, layer.value_sink,
        layer.value_channel_scale, layer.value_shift, value_exact,
        num_tokens, num_kv_heads,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        KEY_BITS=layer.key_bits, VALUE_BITS=layer.value_bits, HEAD_DIM=head_dim, GROUP=layer.group_size,
        PAGE_SIZE=page_size, SINK_TOKENS=layer.sink_tokens, ROTATE=bool(layer.rotate),
        LOG2_HEAD_DIM=head_dim.bit_length() - 1, BLOCK_T=tiles.block_t,
        num_warps=tiles.num_warps, enable_fp_fusion=False,  # no FMA contraction: torch's roundings
    )
    return key_exact, value_exact
