"""The paged TKV KV cache (a `KVStorage`): per layer, packed key/value codes with their fp16 group metadata (each
group's scale and zero side by side), an fp16
sink pool for each sequence's first tokens, an fp16 tail pool holding each running sequence's last
`exact_blocks` blocks exactly (a ring), and the layer's calibrated transform, all on the device; and the
decoding of blocks back to the code space, which readers and the tail seeding share.

Block ids, slots (block_id * block_size + offset) and block tables are those of the bf16 `PagedKVCache`. Only
the first `num_sink_blocks` blocks have a sink row; the engine's block pool gives every sequence a first block
among them (`num_first_blocks`). Each of the engine's batch slots (one per running sequence) has a tail slot, its
ring (`num_batch_slots`). Layout and semantics: docs/tkv.md, "Engine integration" and "Exact window".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from arbi_grpc.config import check_kv_exact_blocks
from arbi_grpc.engine.host_to_device import tensor_on_device_no_sync
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration
from arbi_grpc.kv_codec.codec import ChannelTransform, TkvLayerCodec
from arbi_grpc.kv_codec.packing import packed_width
from arbi_grpc.kv_codec.quantize import QuantizedGroups, dequantize_groups
from arbi_grpc.kv_codec.spec import (
    SINK_ELEMENT_BYTES,
    bytes_per_token,
    sink_bytes_per_sequence,
)


def exact_window_start(position: int, block_size: int, exact_blocks: int) -> int:
    """First position a query at `position` reads exactly (docs/tkv.md, "Exact window"): the start of the block
    `exact_blocks - 1` before its own, 0 near the sequence's start."""
    return max(position // block_size - exact_blocks + 1, 0) * block_size


def tail_ring_row(position, block_size: int, exact_blocks: int):
    """The row of a tail slot (a ring of `exact_blocks` blocks) holding `position`: an int, or an int64 tensor of
    positions."""
    return position // block_size % exact_blocks * block_size + position % block_size


def group_metadata_shape(num_blocks: int, block_size: int, num_kv_heads: int, num_groups: int) -> tuple[int, ...]:
    """Shape of a metadata pool: [num_blocks, Hkv, block_size, D/G, 2], (scale, zero) of each group side by side
    and heads outer within a block, so the decode kernel reads a token's pairs in one load and a block's tokens of
    one head from one contiguous run (docs/tkv.md, "Engine integration", Storage)."""
    return (num_blocks, num_kv_heads, block_size, num_groups, 2)


def split_group_metadata(metadata: Tensor) -> tuple[Tensor, Tensor]:
    """Views (scale, zero) [num_blocks, block_size, Hkv, D/G] of a metadata pool (writable: indexed assignment
    stores into the pool)."""
    scale, zero = metadata.transpose(1, 2).unbind(-1)
    return scale, zero


@dataclass(frozen=True, eq=False)
class TkvLayerStorage:
    """One layer's slice of the cache (views of the pool, not copies).

    key_codes uint8 [num_blocks, block_size, Hkv, D*key_bits/8]; key_metadata fp16 [num_blocks, Hkv, block_size,
    D/G, 2]: each group's (scale, zero) (group_metadata_shape, split_group_metadata); value_* the same with
    value_bits. key_sink / value_sink fp16 [num_sink_blocks,
    sink_tokens, Hkv, D]: position p < sink_tokens of a sequence, stored at [its first block, p] in the code
    space (H x - m) * s (a first block's id is below num_sink_blocks). key_tail / value_tail fp16
    [num_tail_slots, exact_blocks * block_size, Hkv, D]: a ring of a running sequence's last `exact_blocks`
    blocks, position p at [its tail slot, (p // block_size) % exact_blocks * block_size + p % block_size], in
    the same code space. key_channel_scale / key_shift / value_channel_scale / value_shift: fp32 [Hkv, D].
    """

    key_codes: Tensor
    key_metadata: Tensor
    value_codes: Tensor
    value_metadata: Tensor
    key_sink: Tensor
    value_sink: Tensor
    key_tail: Tensor
    value_tail: Tensor
    key_bits: int
    value_bits: int
    group_size: int
    sink_tokens: int
    block_size: int
    rotate: bool
    key_channel_scale: Tensor
    key_shift: Tensor
    value_channel_scale: Tensor
    value_shift: Tensor

    @property
    def num_kv_heads(self) -> int:
        return self.key_channel_scale.shape[0]

    @property
    def head_dim(self) -> int:
        return self.key_channel_scale.shape[1]

    @property
    def exact_blocks(self) -> int:
        """E: how many blocks up to a query's own one it reads exactly (the tail ring's blocks)."""
        return self.key_tail.shape[1] // self.block_size

    def ring_rows(self, positions: Tensor) -> Tensor:
        """Row of each position [N] (int64) in its sequence's tail slot."""
        return tail_ring_row(positions, self.block_size, self.exact_blocks)

    def decoded_blocks(self, blocks: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of `blocks` [N] (int64) in the code space, dequantized from their codes, fp32
        [N, block_size, Hkv, D] (sink positions too: readers overlay the sink pool themselves)."""
        decoded = []
        for codes, metadata, bits in (
            (self.key_codes, self.key_metadata, self.key_bits),
            (self.value_codes, self.value_metadata, self.value_bits),
        ):
            scale, zero = (part.contiguous() for part in split_group_metadata(metadata.index_select(0, blocks)))
            quantized = QuantizedGroups(codes.index_select(0, blocks), scale, zero, bits, self.group_size)
            decoded.append(dequantize_groups(quantized))
        return decoded[0], decoded[1]


class TkvPagedKVCache:
    """The TKV storage of every layer for `num_blocks` blocks of `block_size` tokens, zeroed at creation, with sink
    rows for the first `num_sink_blocks` blocks (all of them when None) and `num_tail_slots` tail slots (the
    sequences that may run at once) of `exact_blocks` blocks each (E: a query reads its own block and the E - 1
    before it exactly). `chunk_exact`: a prefill chunk's queries also read the chunk's own tokens, and the window
    of its first query, exactly (--kv-prefill-exact chunk; docs/tkv.md, "Exact window").

    Built from a TkvCalibration (its per-layer bits are the ones stored; `calibration.engine_bundle` applies
    --kv-bits before). `codec(i)` is layer i's TkvLayerCodec over the same device transform tensors.
    """

    def __init__(
        self, calibration: TkvCalibration, *, num_blocks: int, block_size: int, device: torch.device | str,
        num_sink_blocks: int | None = None, num_tail_slots: int, exact_blocks: int = 1, chunk_exact: bool = True,
    ) -> None:
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size), ("num_tail_slots", num_tail_slots)):
            if value <= 0:
                raise InvalidArgumentError(name, f"must be > 0, got {value}")
        check_kv_exact_blocks(exact_blocks, block_size)
        num_sink_blocks = num_blocks if num_sink_blocks is None else num_sink_blocks
        if not 0 < num_sink_blocks <= num_blocks:
            raise InvalidArgumentError(
                "num_sink_blocks", f"must be in [1, num_blocks={num_blocks}], got {num_sink_blocks}"
            )
        if calibration.sink_tokens > block_size:
            raise InvalidArgumentError(
                "kv_sink_tokens",
                f"{calibration.sink_tokens} sink tokens do not fit in a sequence's first block of {block_size} tokens",
            )
        self.calibration = calibration
        self.num_layers = calibration.num_layers
        self.num_blocks = num_blocks
        self.num_sink_blocks = num_sink_blocks
        self.num_tail_slots = num_tail_slots
        self.exact_blocks = exact_blocks
        self.chunk_exact = chunk_exact
        self.block_size = block_size
        self.num_kv_heads = calibration.num_kv_heads
        self.head_dim = calibration.head_dim
        self._layers = [self._allocate_layer(i, torch.device(device)) for i in range(self.num_layers)]
        self._codecs = [
            TkvLayerCodec(
                calibration.layer_spec(i),
                ChannelTransform(layer.key_channel_scale, layer.key_shift),
                ChannelTransform(layer.value_channel_scale, layer.value_shift),
                calibration.rotate,
            )
            for i, layer in enumerate(self._layers)
        ]

    def _allocate_layer(self, index: int, device: torch.device) -> TkvLayerStorage:
        key_bits, value_bits = self.calibration.layer_bits[index]
        group_size, sink_tokens = self.calibration.group_size, self.calibration.sink_tokens
        slots = (self.num_blocks, self.block_size, self.num_kv_heads)
        metadata = group_metadata_shape(self.num_blocks, self.block_size, self.num_kv_heads,
                                        self.head_dim // group_size)
        sink = (self.num_sink_blocks, sink_tokens, self.num_kv_heads, self.head_dim)
        tail = (self.num_tail_slots, self.exact_blocks * self.block_size, self.num_kv_heads, self.head_dim)

        def zeros(shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
            return torch.zeros(shape, dtype=dtype, device=device)

        def transform(tensor: Tensor) -> Tensor:
            return tensor[index].to(device=device, dtype=torch.float32).contiguous()

        return TkvLayerStorage(
            key_codes=zeros((*slots, packed_width(self.head_dim, key_bits)), torch.uint8),
            key_metadata=zeros(metadata, torch.float16),
            value_codes=zeros((*slots, packed_width(self.head_dim, value_bits)), torch.uint8),
            value_metadata=zeros(metadata, torch.float16),
            key_sink=zeros(sink, torch.float16),
            value_sink=zeros(sink, torch.float16),
            key_tail=zeros(tail, torch.float16),
            value_tail=zeros(tail, torch.float16),
            key_bits=key_bits,
            value_bits=value_bits,
            group_size=group_size,
            sink_tokens=sink_tokens,
            block_size=self.block_size,
            rotate=self.calibration.rotate,
            key_channel_scale=transform(self.calibration.key_scales),
            key_shift=transform(self.calibration.key_shifts),
            value_channel_scale=transform(self.calibration.value_scales),
            value_shift=transform(self.calibration.value_shifts),
        )

    @staticmethod
    def bytes_per_block_for(calibration: TkvCalibration, block_size: int) -> int:
        """Bytes one block costs over all layers (codes and group metadata; sink rows are apart) before
        allocating."""
        return sum(
            block_size * bytes_per_token(calibration.head_dim, calibration.num_kv_heads, calibration.layer_spec(i))
            for i in range(calibration.num_layers)
        )

    @staticmethod
    def sink_row_bytes_for(calibration: TkvCalibration) -> int:
        """Bytes one sink row costs over all layers: `sink_tokens` fp16 keys and values of every KV head."""
        return sum(
            sink_bytes_per_sequence(calibration.head_dim, calibration.num_kv_heads, calibration.layer_spec(i))
            for i in range(calibration.num_layers)
        )

    @staticmethod
    def tail_slot_bytes_for(calibration: TkvCalibration, block_size: int, exact_blocks: int = 1) -> int:
        """Bytes one tail slot costs over all layers: `exact_blocks` blocks of fp16 keys and values of every KV
        head."""
        return (calibration.num_layers * exact_blocks * block_size * calibration.num_kv_heads * calibration.head_dim
                * 2 * SINK_ELEMENT_BYTES)

    @classmethod
    def num_bytes_for(
        cls, calibration: TkvCalibration, block_size: int, num_blocks: int, num_sink_blocks: int, num_tail_slots: int,
        exact_blocks: int = 1,
    ) -> int:
        """Bytes of a whole pool of `num_blocks` blocks, `num_sink_blocks` of them with a sink row, and
        `num_tail_slots` tail slots of `exact_blocks` blocks."""
        return (num_blocks * cls.bytes_per_block_for(calibration, block_size)
                + num_sink_blocks * cls.sink_row_bytes_for(calibration)
                + num_tail_slots * cls.tail_slot_bytes_for(calibration, block_size, exact_blocks))

    @property
    def bytes_per_block(self) -> int:
        return self.bytes_per_block_for(self.calibration, self.block_size)

    @property
    def sink_row_bytes(self) -> int:
        return self.sink_row_bytes_for(self.calibration)

    @property
    def tail_slot_bytes(self) -> int:
        return self.tail_slot_bytes_for(self.calibration, self.block_size, self.exact_blocks)

    @property
    def num_bytes(self) -> int:
        """Bytes of every block, sink row and tail slot (the channel transforms are apart: `transform_bytes`)."""
        return self.num_bytes_for(
            self.calibration, self.block_size, self.num_blocks, self.num_sink_blocks, self.num_tail_slots,
            self.exact_blocks,
        )

    @property
    def codec_tensors(self) -> list[Tensor]:
        """The per-layer channel transforms on the device (outside the blocks: the codec's scratch)."""
        return [
            t for layer in self._layers
            for t in (layer.key_channel_scale, layer.key_shift, layer.value_channel_scale, layer.value_shift)
        ]

    @property
    def transform_bytes(self) -> int:
        """Bytes of `codec_tensors`."""
        return sum(t.numel() * t.element_size() for t in self.codec_tensors)

    @property
    def num_first_blocks(self) -> int:
        """The blocks with a sink row: only they may start a sequence."""
        return self.num_sink_blocks

    @property
    def num_batch_slots(self) -> int:
        """One tail slot per batch slot."""
        return self.num_tail_slots

    @property
    def device(self) -> torch.device:
        return self._layers[0].key_codes.device

    @property
    def setting_name(self) -> str:
        """What is stored, for people: "tkv K4V4 G32 sink1", or the average bits when layers differ; " exact4"
        follows when a query reads more than its own block exactly."""
        calibration = self.calibration
        pairs = set(calibration.layer_bits)
        if len(pairs) == 1:
            key_bits, value_bits = next(iter(pairs))
            bits = f"K{key_bits}V{value_bits}"
        else:
            bits = f"{calibration.average_bits():.2f} bits per layer-allocated K/V"
        window = f" exact{self.exact_blocks}" if self.exact_blocks > 1 else ""
        return f"tkv {bits} G{calibration.group_size} sink{calibration.sink_tokens}{window}"

    @property
    def codec_name(self) -> str:
        return self.setting_name

    @property
    def key_caches(self) -> list[Tensor]:
        """Every pool tensor holding keys (codes, group metadata, sink rows, tails), for memory accounting."""
        return [
            t for layer in self._layers
            for t in (layer.key_codes, layer.key_metadata, layer.key_sink, layer.key_tail)
        ]

    @property
    def value_caches(self) -> list[Tensor]:
        """Every per-block tensor holding values, as `key_caches`."""
        return [
            t for layer in self._layers
            for t in (layer.value_codes, layer.value_metadata, layer.value_sink, layer.value_tail)
        ]

    def layer(self, layer_index: int) -> TkvLayerStorage:
        return self._layers[layer_index]

    def codec(self, layer_index: int) -> TkvLayerCodec:
        """Layer `layer_index`'s codec: encodes K/V into the stored code space with this layer's bits."""
        return self._codecs[layer_index]

    def seed_reused_blocks(self, batch_slot: int, block_table: list[int], num_reused_blocks: int) -> None:
        """A sequence admitted with a prefix hit of h blocks reads blocks max(0, h - E + 1)..h - 1 exactly from its
        tail ring in its first step, but they were never in that slot: write their decoded values there (nothing
        when E is 1: a query's own block is never a reused one)."""
        if self.exact_blocks == 1 or not num_reused_blocks:
            return
        first_block = max(0, num_reused_blocks - self.exact_blocks + 1)
        block_ids = tensor_on_device_no_sync(block_table[first_block:num_reused_blocks], torch.int64, self.device)
        self.seed_tail(batch_slot, block_ids, first_block)

    def seed_tail(self, tail_slot: int, block_ids: Tensor, first_block_index: int) -> None:
        """Write the decoded values (code space, dequantized codes) of `block_ids` [N] (int64, on the cache's
        device), a sequence's blocks `first_block_index`.. `first_block_index + N - 1`, into their ring rows of
        `tail_slot` in every layer: the prefix-cache blocks a (re)admitted sequence's first query reads exactly
        but that were never in its tail. Eager torch ops on the current stream (not for a CUDA graph)."""
        if block_ids.numel() > self.exact_blocks:
            raise ValueError(f"{block_ids.numel()} blocks do not fit a tail ring of {self.exact_blocks} blocks")
        positions = torch.arange(
            first_block_index * self.block_size, (first_block_index + block_ids.numel()) * self.block_size,
            device=self.device,
        )
        for layer in self._layers:
            rows = layer.ring_rows(positions)
            for tail, decoded in zip((layer.key_tail, layer.value_tail), layer.decoded_blocks(block_ids)):
                tail[tail_slot].index_copy_(0, rows, decoded.flatten(0, 1).to(tail.dtype))

