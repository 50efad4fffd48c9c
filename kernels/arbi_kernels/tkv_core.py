"""The Triton helpers the TKV kernels share (their host side, the layer tensors and validation, is tkv_layout.py):
those that locate a token's packed codes, group metadata and sink entry in the paged pools and decode a tile of them
in registers (the exact window, a query's own block and the E - 1 before it: tkv_exact.py).

Layout (docs/tkv.md): a head vector of D channels is D*bits/8 bytes of little-endian packed codes plus D/G fp16
(scale, zero) pairs, so the 8 codes of channels 8i..8i+7 fill exactly `bits` bytes: one "word". Widths 2, 4 and 8
read each word with one 16/32/64-bit load (the wrappers pass the code pool viewed as that integer type); the
attention kernels read 3, 5 and 6 from the pool viewed as int32 (two loads per word, see tkv_layout.packed_code_view), the
write kernel stores them byte by byte. A code decodes as `zero + code * scale`, computed in the dot's dtype
(the code becomes a float by a bit trick, not a conversion instruction) and never written back in full
precision. Pools are contiguous: a head vector's codes are row `slot * num_kv_heads + kv_head` of the code pool
([num_blocks, block_size, Hkv, ..]), its pairs row `(block_id * num_kv_heads + kv_head) * block_size + offset` of
the metadata pool ([num_blocks, Hkv, block_size, D/G, 2], heads outer: one head's pairs for a block are one
contiguous run, so a warp's load of a tile's metadata fills whole 32-byte sectors).
"""

from __future__ import annotations

import triton
import triton.language as tl

from arbi_kernels.attention_core import accumulate_values, online_softmax_update


@triton.jit
def hadamard_rows(x, ROWS: tl.constexpr, HEAD_DIM: tl.constexpr, LOG2_HEAD_DIM: tl.constexpr):
    """Normalized Walsh-Hadamard transform of each row of x [ROWS, D] (D a power of two), in float32: a log2(D)
    butterfly with the same additions in the same order as arbi_grpc.kv_codec.hadamard_rotate, so bit for bit."""
    for stage in tl.static_range(LOG2_HEAD_DIM):
        pairs = tl.reshape(x, [ROWS * HEAD_DIM // (2 << stage), 2, 1 << stage])  # [.., 2, half] (half = 2^stage)
        pairs = tl.permute(pairs, (0, 2, 1))  # [.., half, 2]
        low, high = tl.split(pairs)
        x = tl.reshape(tl.permute(tl.join(low + high, low - high), (0, 2, 1)), [ROWS, HEAD_DIM])
    return x * (HEAD_DIM**-0.5)


@triton.jit
def paged_blocks(block_table_row, tokens, token_valid, PAGE_SIZE: tl.constexpr):
    """Id of the block holding each position of one sequence: [N] int64 (block 0 where not `token_valid`)."""
    return tl.load(block_table_row + tokens // PAGE_SIZE, mask=token_valid, other=0).to(tl.int64)


@triton.jit
def sink_vectors(block_table_row, tokens, token_valid, kv_head, num_kv_heads, SINK_TOKENS: tl.constexpr,
                 PAGE_SIZE: tl.constexpr):
    """Head-vector index of positions p < SINK_TOKENS in a [num_sink_blocks, SINK_TOKENS, Hkv, D] sink pool."""
    block_ids = tl.load(block_table_row + tokens // PAGE_SIZE, mask=token_valid, other=0).to(tl.int64)
    return (block_ids * SINK_TOKENS + tokens) * num_kv_heads + kv_head


@triton.jit
def load_words(codes_ptr, vectors, valid, BITS: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr = True):
    """[N, D/8] little-endian words: word i of a head vector holds its codes 8i..8i+7, code k at bit k*BITS.
    MASKED=False loads every row unpredicated (garbage where not `valid`): all `vectors` must lie in the pool."""
    UNITS_PER_VECTOR: tl.constexpr = HEAD_DIM * BITS // 8 // (codes_ptr.dtype.element_ty.primitive_bitwidth // 8)
    row_mask = valid[:, None] if MASKED else tl.full([vectors.shape[0], 1], True, tl.int1)  # the latter folds away
    if BITS == 2 or BITS == 4 or BITS == 8:  # codes_ptr is the pool viewed as int16 / int32 / int64
        units = tl.arange(0, UNITS_PER_VECTOR)
        word_ptrs = codes_ptr + vectors[:, None] * UNITS_PER_VECTOR + units[None, :]
        words = tl.load(word_ptrs, mask=row_mask, other=0) if MASKED else tl.load(word_ptrs)
    else:  # 3, 5, 6 bits: word i is BITS bytes from byte i*BITS, read from the pool's int32 or uint8 units
        UNIT_BYTES: tl.constexpr = codes_ptr.dtype.element_ty.primitive_bitwidth // 8
        UNSIGNED: tl.constexpr = tl.uint32 if UNIT_BYTES == 4 else tl.uint8
        UNITS: tl.constexpr = 2 if UNIT_BYTES == 4 else BITS  # units one word can overlap (BITS <= 6)
        word_type: tl.constexpr = tl.int32 if BITS * 8 <= 32 else tl.int64
        octets = tl.arange(0, HEAD_DIM // 8)
        first_byte = octets * BITS
        first_unit = first_byte // UNIT_BYTES
        unit_offsets = vectors[:, None] * (HEAD_DIM * BITS // 8 // UNIT_BYTES) + first_unit[None, :]  # [N, D/8]
        stream = tl.zeros([vectors.shape[0], HEAD_DIM // 8], dtype=tl.int64)
        for unit in tl.static_range(UNITS):
            overlaps = (first_unit + unit) * UNIT_BYTES < first_byte + BITS  # [D/8]: the word reaches this unit
            value = tl.load(codes_ptr + unit_offsets + unit, mask=row_mask & overlaps[None, :], other=0)
            stream = stream | (value.to(UNSIGNED, bitcast=True).to(tl.int64) << (8 * UNIT_BYTES * unit))
        words = (stream >> ((first_byte % UNIT_BYTES) * 8).to(tl.int64)[None, :]).to(word_type)
    return words


@triton.jit
def codes_as_floats(codes, DTYPE: tl.constexpr):
    """Unsigned integer codes below 2**10 as exact DTYPE floats without an int-to-float conversion (a slow
    instruction on the GPU): the code is OR-ed into the mantissa of 2**10 (float16) or 2**23 (float32), the
    bits reinterpreted as a float, and that power of two subtracted."""
    if DTYPE == tl.float16:
        return (codes.to(tl.int16) | 0x6400).to(tl.float16, bitcast=True) - 1024.0
    else:
        return (codes.to(tl.int32) | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0


@triton.jit
def _code(words, k: tl.constexpr, BITS: tl.constexpr):
    return (words >> (k * BITS)) & ((1 << BITS) - 1)


@triton.jit
def _codes_k_k1_k2_k3(words, k: tl.constexpr, BITS: tl.constexpr):
    """[..., 2, 2]: element [a, b] is code k + 2a + b."""
    return tl.join(tl.join(_code(words, k, BITS), _code(words, k + 2, BITS)),
                   tl.join(_code(words, k + 1, BITS), _code(words, k + 3, BITS)))


@triton.jit
def unpack_words(words, BITS: tl.constexpr, HEAD_DIM: tl.constexpr):
    """[N, D/8] words -> [N, D] integer codes in the CODE_ORDER of channels (see code_channels): the 8 codes
    of a word are joined (tl.join adds a dimension inside each thread) into [N, D/8, 2, 2, 2], element [a, b, e]
    being code 2a + b + 4e, so a thread decodes whole words, the reshape moves no data, and the two codes that
    share a 32-bit register (e = 0, 1) are 16 bits apart in a 4-bit word: one shift and mask extracts both."""
    codes = tl.join(_codes_k_k1_k2_k3(words, 0, BITS), _codes_k_k1_k2_k3(words, 4, BITS))
    return tl.reshape(codes, [words.shape[0], HEAD_DIM])


@triton.jit
def code_channels(HEAD_DIM: tl.constexpr):
    """[D] the channel each position of a decoded tile holds: within every 8 channels the order
    0, 4, 1, 5, 2, 6, 3, 7 (unpack_words). Attention loads q' and the sink entries and stores its output at
    these channels, so dot products and the output are those of the natural order."""
    positions = tl.arange(0, HEAD_DIM)
    within = positions % 8
    return positions - within + within // 2 + 4 * (within % 2)


@triton.jit
def in_code_order(rows, HEAD_DIM: tl.constexpr):
    """Rows [N, D] in the natural channel order, rearranged into code_channels order in registers (within every 8
    channels [2, 4] -> [4, 2]). Exact tiles load contiguous rows and rearrange them here: gathering them in that
    order made every element its own scalar load, which took a prefill of fp16 tiles to 16x bf16's time."""
    grouped = tl.reshape(rows, [rows.shape[0], HEAD_DIM // 8, 2, 4])
    return tl.reshape(tl.permute(grouped, (0, 1, 3, 2)), [rows.shape[0], HEAD_DIM])


@triton.jit
def in_natural_order(rows, HEAD_DIM: tl.constexpr):
    """The inverse of in_code_order: rows [N, D] in code_channels order back in the natural channel order."""
    grouped = tl.reshape(rows, [rows.shape[0], HEAD_DIM // 8, 4, 2])
    return tl.reshape(tl.permute(grouped, (0, 1, 3, 2)), [rows.shape[0], HEAD_DIM])


@triton.jit
def operand_channels(HEAD_DIM: tl.constexpr):
    """[D] the channel each position of a tile in operand_order holds: q' is loaded and the output stored at these
    channels when the tiles enter the MMAs in that order."""
    positions = tl.arange(0, HEAD_DIM)
    if HEAD_DIM >= 32:
        word = (positions // 2) % 4 * (HEAD_DIM // 32) + positions // 32  # t * D/32 + word in t
        within = (positions // 16) % 2 * 2 + (positions // 8) % 2 + 4 * (positions % 2)  # r + 4e
        return 8 * word + within
    return code_channels(HEAD_DIM)


@triton.jit
def operand_order(rows):
    """Rows [N, D] in code_channels order, rearranged in registers so that each thread's share of a 16-bit
    tensor-core A operand (rows x channels; a thread holds channels 16j + 8h + 2t + e of its rows, t its lane
    mod 4) is the 8 codes of each of D/32 whole words, words D/32 * t to D/32 * (t + 1): a key tile decoded from
    its words (the lane holding its words) enters the score MMA without a round trip through shared memory, and a
    value tile is stored for its MMA by stmatrix. The channel order is not the tiles' concern: q', every tile of a
    kernel and its output take the same one (operand_channels). D < 32 keeps code_channels order."""
    HEAD_DIM: tl.constexpr = rows.shape[1]
    if HEAD_DIM >= 32:
        words = tl.reshape(rows, [rows.shape[0], 4, HEAD_DIM // 32, 2, 2, 2])  # [N, t, word in t, r_hi, r_lo, e]
        rows = tl.reshape(tl.permute(words, (0, 2, 3, 4, 1, 5)), [rows.shape[0], HEAD_DIM])
    return rows


@triton.jit
def load_coded_vectors(codes_ptr, metadata_ptr, blocks, offsets, kv_head, num_kv_heads, valid, BITS: tl.constexpr,
                       HEAD_DIM: tl.constexpr, GROUP: tl.constexpr, PAGE_SIZE: tl.constexpr,
                       MASK_WORDS: tl.constexpr = True):
    """What decoding the vectors of `kv_head` at (block id, offset in the block) [N] reads: packed words [N, D/8]
    (codes [num_blocks, PAGE_SIZE, Hkv, ..]) and fp16 group scales and zeros [N, D/G] (0 where invalid), one load
    of a token's D/G (scale, zero) pairs (metadata [num_blocks, Hkv, PAGE_SIZE, D/G, 2], heads outer: a block's
    pairs of one head are contiguous). MASK_WORDS=False leaves the word loads unpredicated (fewer registers):
    invalid rows then hold whatever their vector's words are, which still decode to exactly 0 with a scale and
    zero of 0, so every block must lie in the pool (paged_blocks sends invalid positions to block 0)."""
    vectors = (blocks * PAGE_SIZE + offsets) * num_kv_heads + kv_head
    words = load_words(codes_ptr, vectors, valid, BITS, HEAD_DIM, MASK_WORDS)
    groups = tl.arange(0, HEAD_DIM // GROUP)
    rows = vectors + (kv_head * (PAGE_SIZE - 1) - offsets * (num_kv_heads - 1))  # (block * Hkv + head) * P + offset
    pairs = tl.load(metadata_ptr + rows[:, None] * (HEAD_DIM // GROUP) + groups[None, :], mask=valid[:, None],
                    other=0)  # [N, D/G] int32: group g's scale in the low 16 bits, its zero in the high 16
    scale = pairs.to(tl.int16).to(tl.float16, bitcast=True)
    zero = (pairs >> 16).to(tl.int16).to(tl.float16, bitcast=True)
    return words, scale, zero


def _nibble_pair_ptx(biased: bool) -> str:
    """The inline PTX of NIBBLE_PAIR_PTX (BIASED_NIBBLE_PAIR_PTX where `biased`)."""
    lines = ["{", "    .reg .b32 mask, bias, pair;", "    mov.b32 mask, 0x000F000F;", "    mov.b32 bias, 0x64006400;"]
    if biased:
        lines.append("    lop3.b32 $0, $1, mask, bias, 0xEA;")
    else:
        lines += ["    lop3.b32 pair, $1, mask, bias, 0xEA;", "    sub.rn.f16x2 $0, pair, bias;"]
    return "\n".join([*lines, "}"])


NIBBLE_PAIR_PTX = tl.constexpr(_nibble_pair_ptx(biased=False))
"""An int32 whose bits 0-3 and 16-19 are two codes to those codes as two float16 in one int32 (the first in the low
half): one lop3 (x & 0x000F000F) | 0x64006400 masks both and gives them the exponent of 1024, one packed subtraction
removes the 1024."""

BIASED_NIBBLE_PAIR_PTX = tl.constexpr(_nibble_pair_ptx(biased=True))
"""NIBBLE_PAIR_PTX without the subtraction: each code c comes out as the float16 1024 + c (exact)."""


@triton.jit
def nibble_words_as_halves(words, HEAD_DIM: tl.constexpr, BIASED: tl.constexpr = False):
    """[N, D/8] int32 4-bit words -> float16 codes [N, D] in code_channels order, by inline PTX (compiled kernels
    only, not the interpreter): per 8 codes 3 shifts (codes r and r + 4 at bits 0 and 16 of w >> 4r), 4 lop3 and 4
    packed subtractions (NIBBLE_PAIR_PTX), each asm on one element, whose two halves are then split into two
    elements. So each element is computed from its own input alone, whatever register layout Triton gives the tile
    (an asm that read one word per 8 outputs was wrong once a key tile took the layout of its MMA operand, whose
    registers interleave two rows), and where the two halves stay in one register the split costs nothing.
    BIASED: codes c as 1024 + c, without the subtractions."""
    shifted = tl.join(words, words >> 8)
    shifted = tl.join(shifted, shifted >> 4)  # [N, D/8, 2, 2]: element [a, b] is w >> 4r, r = 2a + b
    pairs = tl.inline_asm_elementwise(BIASED_NIBBLE_PAIR_PTX if BIASED else NIBBLE_PAIR_PTX, "=r,r", [shifted],
                                      dtype=tl.int32, is_pure=True, pack=1)  # codes r and r + 4 as two float16
    codes = tl.join(pairs.to(tl.int16).to(tl.float16, bitcast=True),
                    (pairs >> 16).to(tl.int16).to(tl.float16, bitcast=True))  # [N, D/8, 2, 2, 2]: code 2a + b + 4e
    return tl.reshape(codes, [words.shape[0], HEAD_DIM])


INTERPRETED = tl.constexpr(triton.knobs.runtime.interpret)
"""Whether the kernels run in Triton's interpreter (TRITON_INTERPRET=1, read when they are defined, as Triton reads
it), which runs no inline PTX."""


@triton.jit
def fused_multiply_add(x, y, z):
    """x * y + z rounded once, y and z broadcast to x's shape. `z + x * y` rounds a float16 product first
    wherever Triton does not contract the two: always in the interpreter, and in compiles with fp fusion off
    (Triton's default from 3.10); decoded values then carry up to 2^-11 of |code * scale| more error into the
    scores. Compiled float16 takes fma.rn.f16x2 by inline PTX, the code the contracted form compiled to: tl.fma's
    scalar fma.rn.f16 left LLVM pairing fewer of them, 8% more instructions in the TKV prefill kernel's coded-tile
    loop (sm_90 SASS, K4V4). The interpreter, which runs no PTX, takes tl.fma: one rounding there too."""
    y = tl.broadcast_to(y, x.shape)
    z = tl.broadcast_to(z, x.shape)
    if x.dtype == tl.float16 and not INTERPRETED:
        return tl.inline_asm_elementwise("fma.rn.f16x2 $0, $1, $2, $3;", "=r,r,r,r", [x, y, z], dtype=tl.float16,
                                         is_pure=True, pack=2)
    return tl.fma(x, y, z)


@triton.jit
def decode_vectors(words, scale, zero, BITS: tl.constexpr, HEAD_DIM: tl.constexpr, GROUP: tl.constexpr,
                   DTYPE: tl.constexpr, PTX_NIBBLES: tl.constexpr = False):
    """DTYPE [N, D] = zero + code * scale in registers, channels in code_channels order: one fused multiply-add
    (fused_multiply_add), so one rounding, as in float32 then a cast. PTX_NIBBLES: 4-bit words become float16 codes
    by inline PTX (nibble_words_as_halves) in compiled float16 kernels; elsewhere the flag changes nothing."""
    if BITS == 4 and PTX_NIBBLES and DTYPE == tl.float16 and not INTERPRETED:
        codes = tl.reshape(nibble_words_as_halves(words, HEAD_DIM), [words.shape[0], HEAD_DIM // GROUP, GROUP])
    else:
        codes = unpack_words(words, BITS, HEAD_DIM)  # [N, D]
        codes = codes_as_floats(tl.reshape(codes, [words.shape[0], HEAD_DIM // GROUP, GROUP]), DTYPE)
    values = fused_multiply_add(codes, scale.to(DTYPE)[:, :, None], zero.to(DTYPE)[:, :, None])  # [N, D/G, G]
    return tl.reshape(values, [words.shape[0], HEAD_DIM])


@triton.jit
def load_sink_tile(sink_ptr, vectors, valid, HEAD_DIM: tl.constexpr):
    """Sink entries (already in the code space, fp16) of head vectors `vectors` [N]: float32 [N, D], channels in
    the decoded tiles' order (code_channels)."""
    dims = tl.arange(0, HEAD_DIM)
    rows = tl.load(sink_ptr + vectors[:, None] * HEAD_DIM + dims[None, :], mask=valid[:, None], other=0.0)
    return in_code_order(rows, HEAD_DIM).to(tl.float32)


@triton.jit
def attend_tile(q, k, visible, m_i, l_i, acc, APPLY_MASK: tl.constexpr, DOT_PRECISION: tl.constexpr,
                TRANSPOSED_DOTS: tl.constexpr = False):
    """The score half of a flash-attention update (see attention_core.online_softmax_step): returns the new
    (m_i, l_i), acc rescaled, and the weights p [M, N] the caller multiplies into its value tile. Splitting
    here lets a caller decode V only after K's tile is dead, which keeps D=128 tiles in registers.
    TRANSPOSED_DOTS computes the scores as (k @ q^T)^T, k taken in operand_order (so q' must come in that
    order), and accumulate_tile_values the sum as (v^T @ p^T)^T: with 64 keys and 4 warps both are Hopper
    warpgroup MMAs, where the register MMAs of a 16-row q or p cost register moves (decode; a caller's tiles must
    all agree, or the running state changes layout between them)."""
    if TRANSPOSED_DOTS:  # q arrives in operand_order
        scores = tl.trans(tl.dot(operand_order(k), tl.trans(q), input_precision=DOT_PRECISION))  # [M, N], log2
    else:
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # [M, N], log2 units (q is pre-scaled)
    return online_softmax_update(scores, visible, m_i, l_i, acc, APPLY_MASK)


@triton.jit
def accumulate_tile_values(acc, p, v, DOT_PRECISION: tl.constexpr, TRANSPOSED_DOTS: tl.constexpr = False):
    """accumulate_values of a value tile v [N, D] in code_channels order; TRANSPOSED_DOTS (see attend_tile) takes
    it in operand_order, so acc's channels come in operand_channels order."""
    if TRANSPOSED_DOTS:
        v = operand_order(v)
    return accumulate_values(acc, p, v, DOT_PRECISION, TRANSPOSED_DOTS)


@triton.jit
def attend_coded_tile(
    q, tokens, visible, coded, block_table_row, kv_head, num_kv_heads, m_i, l_i, acc,
    key_codes_ptr, key_metadata_ptr, value_codes_ptr, value_metadata_ptr,
    APPLY_MASK: tl.constexpr, KEY_BITS: tl.constexpr, VALUE_BITS: tl.constexpr, GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr, DOT_PRECISION: tl.constexpr, MASK_WORDS: tl.constexpr = True,
    TRANSPOSED_DOTS: tl.constexpr = False, PTX_NIBBLES: tl.constexpr = False,
):
    """Fold the coded positions `tokens` (where `coded`) of one sequence and kv head into (m_i, l_i, acc):
    K read, decoded and scored first, then V read, decoded and summed, both decoded straight into q's dtype.
    MASK_WORDS: as load_coded_vectors; TRANSPOSED_DOTS: as attend_tile; PTX_NIBBLES: as decode_vectors."""
    blocks, offsets = paged_blocks(block_table_row, tokens, coded, PAGE_SIZE), tokens % PAGE_SIZE
    words, scale, zero = load_coded_vectors(key_codes_ptr, key_metadata_ptr, blocks, offsets, kv_head, num_kv_heads,
                                            coded, KEY_BITS, HEAD_DIM, GROUP, PAGE_SIZE, MASK_WORDS)
    k = decode_vectors(words, scale, zero, KEY_BITS, HEAD_DIM, GROUP, q.dtype, PTX_NIBBLES)
    m_i, l_i, acc, p = attend_tile(q, k, visible, m_i, l_i, acc, APPLY_MASK, DOT_PRECISION, TRANSPOSED_DOTS)
    words, scale, zero = load_coded_vectors(value_codes_ptr, value_metadata_ptr, blocks, offsets, kv_head,
                                            num_kv_heads, coded, VALUE_BITS, HEAD_DIM, GROUP, PAGE_SIZE, MASK_WORDS)
    v = decode_vectors(words, scale, zero, VALUE_BITS, HEAD_DIM, GROUP, q.dtype, PTX_NIBBLES)
    return m_i, l_i, accumulate_tile_values(acc, p, v, DOT_PRECISION, TRANSPOSED_DOTS)


@triton.jit
def attend_decoded_tile(
    q, visible, key_words, key_scale, key_zero, value_words, value_scale, value_zero, m_i, l_i, acc,
    KEY_BITS: tl.constexpr, VALUE_BITS: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    DOT_PRECISION: tl.constexpr, TRANSPOSED_DOTS: tl.constexpr = False, PTX_NIBBLES: tl.constexpr = False,
):
    """attend_coded_tile over a tile whose words, scales and zeros were loaded earlier (load_coded_vectors)."""
    k = decode_vectors(key_words, key_scale, key_zero, KEY_BITS, HEAD_DIM, GROUP, q.dtype, PTX_NIBBLES)
    m_i, l_i, acc, p = attend_tile(q, k, visible, m_i, l_i, acc, True, DOT_PRECISION, TRANSPOSED_DOTS)
    v = decode_vectors(value_words, value_scale, value_zero, VALUE_BITS, HEAD_DIM, GROUP, q.dtype, PTX_NIBBLES)
    return m_i, l_i, accumulate_tile_values(acc, p, v, DOT_PRECISION, TRANSPOSED_DOTS)


@triton.jit
def attend_sink_tile(q, tokens, visible, in_sink, block_table_row, kv_head, num_kv_heads, m_i, l_i, acc,
                     key_sink_ptr, value_sink_ptr, SINK_TOKENS: tl.constexpr, HEAD_DIM: tl.constexpr,
                     PAGE_SIZE: tl.constexpr, DOT_PRECISION: tl.constexpr, TRANSPOSED_DOTS: tl.constexpr = False):
    """Fold the sink positions `tokens` (where `in_sink`), read from the fp16 sink pools, into (m_i, l_i, acc).
    TRANSPOSED_DOTS: as attend_tile."""
    vectors = sink_vectors(block_table_row, tokens, in_sink, kv_head, num_kv_heads, SINK_TOKENS, PAGE_SIZE)
    k = load_sink_tile(key_sink_ptr, vectors, in_sink, HEAD_DIM)
    m_i, l_i, acc, p = attend_tile(q, k.to(q.dtype), visible, m_i, l_i, acc, True, DOT_PRECISION, TRANSPOSED_DOTS)
    v = load_sink_tile(value_sink_ptr, vectors, in_sink, HEAD_DIM)
    return m_i, l_i, accumulate_tile_values(acc, p, v.to(q.dtype), DOT_PRECISION, TRANSPOSED_DOTS)
