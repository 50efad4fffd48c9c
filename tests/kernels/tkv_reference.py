"""Torch references for the TKV kernels, built on arbi_grpc.kv_codec's own encoder and decoder, so that any
change to the codec shows up as a kernel mismatch. Float32, slow, obvious.

The attention references read the same paged pools as the kernels, by the rules of docs/tkv.md: a key position
j < sink_tokens comes from the sink pool; one in the query's exact region is exact: from the step's exact buffer
(write_tkv_cache's result) at or after the sequence's prefix_len, from its tail slot's ring of E blocks before;
every other one is decoded from its codes. The exact region of a query at position p is its window, its own block
and the E - 1 before it (j // block_size >= p // block_size - (E - 1), E = the tail's rows / block_size); with
`chunk_exact` (prefill), the window of the chunk's first query and everything after it. Queries are already in the key
code space (q') and outputs stay in the value code space (acc), as the kernels' contract says (docs/tkv.md,
"Engine integration").
"""

from __future__ import annotations

import torch

from arbi_grpc.kv_codec import (
    ChannelTransform,
    QuantizedGroups,
    TkvLayerCodec,
    TkvSpec,
    dequantize_groups,
)
from arbi_grpc.kv_codec.paged_cache import exact_window_start, split_group_metadata, tail_ring_row
from arbi_kernels.tkv_layout import TkvLayerTensors
from arbi_kernels.tkv_exact import exact_window_blocks
from tests.kernels.reference import _causal_attention


def layer_codec(layer: TkvLayerTensors) -> TkvLayerCodec:
    """The codec whose encoding `layer` stores: its bits, group size, sink count, rotation and transforms."""
    return TkvLayerCodec(
        TkvSpec(layer.key_bits, layer.value_bits, layer.group_size, layer.sink_tokens),
        ChannelTransform(layer.key_channel_scale, layer.key_shift),
        ChannelTransform(layer.value_channel_scale, layer.value_shift),
        layer.rotate,
    )


def write_tkv_cache_reference(
    key: torch.Tensor,
    value: torch.Tensor,
    positions: torch.Tensor,
    slot_mapping: torch.Tensor,
    layer: TkvLayerTensors,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode key/value [T, Hkv, D] with the codec into their slots; positions < sink_tokens also fill the sink
    pool with the code-space vector (H x - m) * s. A negative slot skips the token. Returns (key_exact,
    value_exact): fp16 [T, Hkv, D], each kept token's code-space vector (zeros for skipped ones)."""
    codec = layer_codec(layer)
    kept = slot_mapping >= 0
    slots, kept_positions = slot_mapping[kept], positions[kept]
    is_sink = kept_positions < layer.sink_tokens
    sink_index = (slots[is_sink] // layer.block_size, kept_positions[is_sink])  # [block holding p, p]
    slot_index = (slots // layer.block_size, slots % layer.block_size)
    exact = []
    for kind, tokens, transform in (("key", key[kept], codec.keys), ("value", value[kept], codec.values)):
        encoded = codec.encode_keys(tokens) if kind == "key" else codec.encode_values(tokens)
        getattr(layer, f"{kind}_codes").flatten(0, 1)[slots] = encoded.codes
        scale, zero = split_group_metadata(getattr(layer, f"{kind}_metadata"))
        scale[slot_index], zero[slot_index] = encoded.scale, encoded.zero
        code_space = transform.forward(codec.into_rotated_space(tokens.float())).to(torch.float16)  # [T', Hkv, D]
        getattr(layer, f"{kind}_sink")[sink_index] = code_space[is_sink]
        rows = torch.zeros(key.shape, dtype=torch.float16, device=key.device)
        rows[kept] = code_space
        exact.append(rows)
    return exact[0], exact[1]


def store_tkv_tail_reference(
    key_exact: torch.Tensor,
    value_exact: torch.Tensor,
    layer: TkvLayerTensors,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    tail_slots: torch.Tensor,
) -> None:
    """Copy each step token in its sequence's last E blocks (position p) to [its tail slot, its ring row]."""
    starts = query_start_loc.tolist()
    exact_blocks = exact_window_blocks(layer)
    for seq, (seq_len, slot) in enumerate(zip(seq_lens.tolist(), tail_slots.tolist())):
        prefix_len = seq_len - (starts[seq + 1] - starts[seq])
        first_stored = max(exact_window_start(seq_len - 1, layer.block_size, exact_blocks), prefix_len)
        for position in range(first_stored, seq_len):
            row = starts[seq] + position - prefix_len
            ring_row = tail_ring_row(position, layer.block_size, exact_blocks)
            layer.key_tail[slot, ring_row] = key_exact[row]
            layer.value_tail[slot, ring_row] = value_exact[row]


def context_in_code_space(layer: TkvLayerTensors, kind: str, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """The first `length` positions of one sequence, decoded (sink pool below sink_tokens): fp32 [length, Hkv, D]."""
    positions = torch.arange(length, device=block_table.device)
    block_ids = block_table.long()[positions // layer.block_size]
    offsets = positions % layer.block_size
    scale, zero = split_group_metadata(getattr(layer, f"{kind}_metadata"))
    encoded = QuantizedGroups(
        codes=getattr(layer, f"{kind}_codes")[block_ids, offsets],
        scale=scale[block_ids, offsets],
        zero=zero[block_ids, offsets],
        bits=getattr(layer, f"{kind}_bits"),
        group_size=layer.group_size,
    )
    context = dequantize_groups(encoded)
    num_sink = min(layer.sink_tokens, length)
    context[:num_sink] = getattr(layer, f"{kind}_sink")[block_ids[:num_sink], positions[:num_sink]].float()
    return context


def _with_window_exact(context: torch.Tensor, layer: TkvLayerTensors, kind: str, block_start: int, block_end: int,
                       prefix_len: int, first_row: int, exact: torch.Tensor, tail_slot: int) -> torch.Tensor:
    """The context [0, block_end) of the queries in the block starting at block_start, their exact window's
    positions at or after sink_tokens replaced by their exact values: this step's (row first_row + j - prefix_len
    of `exact`) from prefix_len on, the tail slot's ring rows before."""
    context = context[:block_end].clone()
    exact_blocks = exact_window_blocks(layer)
    exact_start = max(exact_window_start(block_start, layer.block_size, exact_blocks), layer.sink_tokens)
    step_start = max(exact_start, prefix_len)
    context[step_start:block_end] = exact[first_row + step_start - prefix_len : first_row + block_end - prefix_len]
    tail_positions = range(exact_start, min(prefix_len, block_end))
    ring_rows = [tail_ring_row(j, layer.block_size, exact_blocks) for j in tail_positions]
    if ring_rows:
        tail = getattr(layer, f"{kind}_tail")[tail_slot]
        context[exact_start : exact_start + len(ring_rows)] = tail[ring_rows].float()
    return context


def tkv_paged_prefill_attention_reference(
    query: torch.Tensor,
    layer: TkvLayerTensors,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    tail_slots: torch.Tensor,
    key_exact: torch.Tensor,
    value_exact: torch.Tensor,
    softmax_scale: float,
    chunk_exact: bool = True,
) -> torch.Tensor:
    """Causal attention of q' [T, Hq, D] over the paged TKV context, each query's exact region exact; fp32
    [T, Hq, D] in the value code space. Queries that share their context (the chunk with `chunk_exact`, else one
    block's) attend together."""
    output = torch.zeros(query.shape, dtype=torch.float32, device=query.device)
    starts = query_start_loc.tolist()
    block_size = layer.block_size
    for seq, (seq_len, tail_slot) in enumerate(zip(seq_lens.tolist(), tail_slots.tolist())):
        begin, end = starts[seq], starts[seq + 1]
        if end == begin:
            continue
        prefix_len = seq_len - (end - begin)
        keys = context_in_code_space(layer, "key", block_tables[seq], seq_len)
        values = context_in_code_space(layer, "value", block_tables[seq], seq_len)
        first_block = prefix_len // block_size * block_size
        for block_start in (first_block,) if chunk_exact else range(first_block, seq_len, block_size):
            block_end = seq_len if chunk_exact else min(block_start + block_size, seq_len)
            query_block = (block_start, block_end, prefix_len, begin)
            rows = slice(begin + max(block_start, prefix_len) - prefix_len, begin + block_end - prefix_len)
            output[rows] = _causal_attention(  # the rows are the context's last positions, as it expects
                query[rows],
                _with_window_exact(keys, layer, "key", *query_block, key_exact, tail_slot),
                _with_window_exact(values, layer, "value", *query_block, value_exact, tail_slot),
                softmax_scale,
            )
    return output


def tkv_paged_decode_attention_reference(
    query: torch.Tensor,
    layer: TkvLayerTensors,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    tail_slots: torch.Tensor,
    key_exact: torch.Tensor,
    value_exact: torch.Tensor,
    softmax_scale: float,
) -> torch.Tensor:
    """One q' per sequence ([B, Hq, D], at position seq_len - 1, its exact K/V in row b of key_exact /
    value_exact), its exact window exact; fp32 [B, Hq, D], zeros where seq_len is 0."""
    output = torch.zeros(query.shape, dtype=torch.float32, device=query.device)
    one_query = torch.tensor([0, 1], dtype=torch.int32, device=query.device)
    for seq, seq_len in enumerate(seq_lens.tolist()):
        if seq_len > 0:
            row = slice(seq, seq + 1)
            output[row] = tkv_paged_prefill_attention_reference(
                query[row], layer, block_tables[row], one_query, seq_lens[row], tail_slots[row], key_exact[row],
                value_exact[row], softmax_scale,
            )
    return output
