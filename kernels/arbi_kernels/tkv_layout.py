"""The host side of the TKV kernels: the layer tensors they read and write, their validation, the views of the
packed code pool each kernel loads through, and the dtype and tile choices made before a launch. The Triton
helpers that decode those layouts in registers are in tkv_core.py; the layout itself is described there.
"""

from __future__ import annotations

from typing import Protocol

import torch
import triton
import triton.language as tl

from arbi_kernels.checks import require_head_dim, require_same_device
from arbi_kernels.limits import MAX_EXACT_WINDOW_TOKENS, SUPPORTED_BITS

WORD_DTYPES: dict[int, torch.dtype] = {2: torch.int16, 4: torch.int32, 8: torch.int64}
"""Widths whose 8-code word is a whole machine integer; the others are read byte by byte."""
COMPUTE_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.float32)


class TkvLayerTensors(Protocol):
    """One layer of a paged TKV cache as the kernels see it (arbi_grpc's TkvLayerStorage has these fields).

    *_codes uint8 [num_blocks, block_size, Hkv, D*bits/8]; *_metadata fp16 [num_blocks, Hkv, block_size, D/G, 2]
    (each group's scale and zero side by side, heads outer within a block); *_sink fp16 [num_sink_blocks <=
    num_blocks, sink_tokens, Hkv, D] (position p < sink_tokens at [block holding p, p], in the code space; a
    sequence's first block id is below num_sink_blocks); *_channel_scale / *_shift fp32 [Hkv, D] (the calibrated
    transform the write applies); *_tail fp16 [num_tail_slots, E * block_size, Hkv, D], a ring of E blocks per
    running sequence (position p of one of its last E blocks at [its tail slot, (p // block_size) % E * block_size
    + p % block_size], in the code space: the exact window, the query's own block and the E - 1 before it,
    docs/tkv.md; tkv_exact.py).
    """

    key_codes: torch.Tensor
    key_metadata: torch.Tensor
    value_codes: torch.Tensor
    value_metadata: torch.Tensor
    key_sink: torch.Tensor
    value_sink: torch.Tensor
    key_tail: torch.Tensor
    value_tail: torch.Tensor
    key_bits: int
    value_bits: int
    group_size: int
    sink_tokens: int
    block_size: int
    rotate: bool
    key_channel_scale: torch.Tensor
    key_shift: torch.Tensor
    value_channel_scale: torch.Tensor
    value_shift: torch.Tensor


def _require_pool(name: str, tensor: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    if tuple(tensor.shape) != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {tuple(tensor.shape)}")
    if tensor.dtype != dtype:
        raise ValueError(f"{name}: dtype must be {dtype}, got {tensor.dtype}")
    if not tensor.is_contiguous():
        raise ValueError(f"{name}: must be contiguous (the kernels compute offsets from its shape)")


def require_bits(name: str, bits: int) -> None:
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"{name}: must be one of {SUPPORTED_BITS}, got {bits}")


def validate_tkv_layer(layer: TkvLayerTensors) -> tuple[int, int, int, int]:
    """Check every pool against the layer's bits, group size and sink count; returns (num_blocks, block_size,
    num_kv_heads, head_dim), with head_dim read from the channel transforms."""
    require_bits("key_bits", layer.key_bits)
    require_bits("value_bits", layer.value_bits)
    num_kv_heads, head_dim = layer.key_channel_scale.shape
    require_head_dim("key_channel_scale", head_dim)
    group = layer.group_size
    if group < 8 or group & (group - 1) or head_dim % group:
        raise ValueError(f"group_size: must be a power of two >= 8 dividing head_dim {head_dim}, got {group}")
    if not 0 <= layer.sink_tokens <= layer.block_size:
        raise ValueError(f"sink_tokens: must be in [0, block_size={layer.block_size}], got {layer.sink_tokens}")
    num_blocks = layer.key_codes.shape[0]
    slots = (num_blocks, layer.block_size, num_kv_heads)
    _require_pool("key_codes", layer.key_codes, (*slots, head_dim * layer.key_bits // 8), torch.uint8)
    _require_pool("value_codes", layer.value_codes, (*slots, head_dim * layer.value_bits // 8), torch.uint8)
    for name in ("key_metadata", "value_metadata"):
        _require_pool(name, getattr(layer, name), (num_blocks, num_kv_heads, layer.block_size, head_dim // group, 2),
                      torch.float16)
    num_sink_blocks = layer.key_sink.shape[0]  # only the blocks that may start a sequence have a sink row
    if not 0 < num_sink_blocks <= num_blocks:
        raise ValueError(f"key_sink: must have 1 to num_blocks={num_blocks} rows, got {num_sink_blocks}")
    for name in ("key_sink", "value_sink"):
        _require_pool(name, getattr(layer, name), (num_sink_blocks, layer.sink_tokens, num_kv_heads, head_dim),
                      torch.float16)
    num_tail_slots, window_rows = layer.key_tail.shape[:2]
    if num_tail_slots < 1:
        raise ValueError("key_tail: must have at least one tail slot, got 0")
    if window_rows < layer.block_size or window_rows % layer.block_size or window_rows > MAX_EXACT_WINDOW_TOKENS:
        raise ValueError(
            f"key_tail: rows per tail slot must be a positive multiple of block_size={layer.block_size} (the exact "
            f"window's blocks) and at most {MAX_EXACT_WINDOW_TOKENS}, got {window_rows}"
        )
    for name in ("key_tail", "value_tail"):
        _require_pool(name, getattr(layer, name), (num_tail_slots, window_rows, num_kv_heads, head_dim),
                      torch.float16)
    for name in ("key_channel_scale", "key_shift", "value_channel_scale", "value_shift"):
        _require_pool(name, getattr(layer, name), (num_kv_heads, head_dim), torch.float32)
    require_same_device({name: getattr(layer, name) for name in TkvLayerTensors.__annotations__
                         if isinstance(getattr(layer, name), torch.Tensor)})
    return num_blocks, layer.block_size, num_kv_heads, head_dim


def code_words(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """The code pool as the kernels read it: one integer per 8 codes where that is a machine word, else bytes."""
    word_dtype = WORD_DTYPES.get(bits)
    return codes if word_dtype is None else codes.view(word_dtype)


def packed_code_view(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """The code pool as the attention kernels read it: code_words, except that 3, 5 and 6 bits come as int32
    units (two loads per 8-code word instead of `bits` byte loads) where a head vector is a whole number of
    them, i.e. unless head_dim is 16."""
    if bits in WORD_DTYPES or codes.shape[-1] % 4:
        return code_words(codes, bits)
    return codes.view(torch.int32)


def metadata_pair_view(metadata: torch.Tensor) -> torch.Tensor:
    """A group metadata pool as the attention kernels read it: int32 [.., D/G, 1], each group's (scale, zero)
    fp16 pair one word (scale in the low half), so a tile's metadata is a load of 4-byte words, which Triton's
    software pipeliner turns into asynchronous copies (it leaves the 2-byte loads of the fp16 view synchronous)."""
    return metadata.view(torch.int32)


def require_compute_dtype(compute_dtype: torch.dtype) -> None:
    if compute_dtype not in COMPUTE_DTYPES:
        raise ValueError(f"compute_dtype: must be torch.float16 or torch.float32, got {compute_dtype}")


def triton_dtype(dtype: torch.dtype) -> tl.dtype:
    return tl.float16 if dtype == torch.float16 else tl.float32


def compute_precision(dtype: torch.dtype) -> str:
    """float32 tiles get exact products (the interpreter and correctness runs); float16 uses tensor cores."""
    return "ieee" if dtype == torch.float32 else "tf32"


def sink_tile_size(sink_tokens: int) -> int:
    """Rows of the one tile holding the sink prefix (tl.dot needs at least 16)."""
    return max(16, triton.next_power_of_2(max(sink_tokens, 1)))
