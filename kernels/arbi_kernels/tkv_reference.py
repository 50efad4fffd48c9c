"""Torch references for the TKV kernels, built on arbi_grpc.kv_codec's own encoder and decoder, so that any
change to the codec shows up as a kernel mismatch. Float32, slow, obvious.

The attention references read the same paged pools as the kernels: a context position p < sink_tokens comes
from the sink pool, every other one is decoded from its codes; queries are already in the key code space (q')
and outputs stay in the value code space (acc), as the kernels' contract says (docs/tkv.md, "Engine integration").
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
from arbi_kernels.reference import _causal_attention
from arbi_kernels.tkv_core import TkvLayerTensors


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
) -> None:
    """Encode key/value [T, Hkv, D] with the codec into their slots; positions < sink_tokens also fill the sink
    pool with the code-space vector (H x - m) * s. A negative slot skips the token."""
    codec = layer_codec(layer)
    kept = slot_mapping >= 0
    slots, kept_positions = slot_mapping[kept], positions[kept]
    is_sink = kept_positions < layer.sink_tokens
    sink_index = (slots[is_sink] // layer.block_size, kept_positions[is_sink])  # [block holding p, p]
    for kind, tokens, transform in (("key", key[kept], codec.keys), ("value", value[kept], codec.values)):
        encoded = codec.encode_keys(tokens) if kind == "key" else codec.encode_values(tokens)
        getattr(layer, f"{kind}_codes").flatten(0, 1)[slots] = encoded.codes
        getattr(layer, f"{kind}_scale").flatten(0, 1)[slots] = encoded.scale
        getattr(layer, f"{kind}_zero").flatten(0, 1)[slots] = encoded.zero
        code_space = transform.forward(codec.into_rotated_space(tokens.float()))  # [T', Hkv, D]
        getattr(layer, f"{kind}_sink")[sink_index] = code_space[is_sink].to(torch.float16)


def _context_in_code_space(layer: TkvLayerTensors, kind: str, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """The first `length` positions of one sequence, decoded (sink pool below sink_tokens): fp32 [length, Hkv, D]."""
    positions = torch.arange(length, device=block_table.device)
    block_ids = block_table.long()[positions // layer.block_size]
    slots = block_ids * layer.block_size + positions % layer.block_size
    encoded = QuantizedGroups(
        codes=getattr(layer, f"{kind}_codes").flatten(0, 1)[slots],
        scale=getattr(layer, f"{kind}_scale").flatten(0, 1)[slots],
        zero=getattr(layer, f"{kind}_zero").flatten(0, 1)[slots],
        bits=getattr(layer, f"{kind}_bits"),
        group_size=layer.group_size,
    )
    context = dequantize_groups(encoded)
    num_sink = min(layer.sink_tokens, length)
    context[:num_sink] = getattr(layer, f"{kind}_sink")[block_ids[:num_sink], positions[:num_sink]].float()
    return context


def tkv_paged_prefill_attention_reference(
    query: torch.Tensor,
    layer: TkvLayerTensors,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
) -> torch.Tensor:
    """Causal attention of q' [T, Hq, D] over the paged TKV context; fp32 [T, Hq, D] in the value code space."""
    output = torch.zeros(query.shape, dtype=torch.float32, device=query.device)
    starts = query_start_loc.tolist()
    for seq, seq_len in enumerate(seq_lens.tolist()):
        begin, end = starts[seq], starts[seq + 1]
        if end == begin:
            continue
        keys = _context_in_code_space(layer, "key", block_tables[seq], seq_len)
        values = _context_in_code_space(layer, "value", block_tables[seq], seq_len)
        output[begin:end] = _causal_attention(query[begin:end], keys, values, softmax_scale)
    return output


def tkv_paged_decode_attention_reference(
    query: torch.Tensor,
    layer: TkvLayerTensors,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
) -> torch.Tensor:
    """One q' per sequence ([B, Hq, D], at position seq_len - 1); fp32 [B, Hq, D], zeros where seq_len is 0."""
    output = torch.zeros(query.shape, dtype=torch.float32, device=query.device)
    for seq, seq_len in enumerate(seq_lens.tolist()):
        if seq_len == 0:
            continue
        keys = _context_in_code_space(layer, "key", block_tables[seq], seq_len)
        values = _context_in_code_space(layer, "value", block_tables[seq], seq_len)
        output[seq] = _causal_attention(query[seq : seq + 1], keys, values, softmax_scale)[0]
    return output
