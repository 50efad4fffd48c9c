"""Reference attention over a TKV-encoded cache, computed the way fused kernels will: in the rotated space.

Keys are never un-rotated: the query is rotated once instead (H orthonormal, so (Hq).(Hk) == q.k). Values are
summed in the rotated space, sum_j p_j (H v_j) == H (sum_j p_j v_j), and the output is un-rotated once.
"""

from __future__ import annotations

import torch

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec.codec import TkvLayerCodec
from arbi_grpc.kv_codec.quantize import QuantizedGroups


def rotated_space_attention(
    query: torch.Tensor,
    rotated_keys: torch.Tensor,
    rotated_values: torch.Tensor,
    codec: TkvLayerCodec,
    causal: bool = True,
) -> torch.Tensor:
    """Attention of query [T, Hq, D] over rotated keys/values [S, Hkv, D]; returns [T, Hq, D] in model space.

    With `causal`, query t sits at position S - T + t (queries are the newest tokens of the sequence).
    """
    num_queries, num_heads, head_dim = query.shape
    num_keys, num_kv_heads, _ = rotated_keys.shape
    if num_heads % num_kv_heads:
        raise InvalidArgumentError("num_kv_heads", f"{num_kv_heads} does not divide {num_heads} query heads")
    if causal and num_queries > num_keys:
        raise InvalidArgumentError("query", f"{num_queries} causal queries but only {num_keys} cached tokens")
    heads_per_kv = num_heads // num_kv_heads
    rotated_query = codec.into_rotated_space(query.float()).transpose(0, 1)  # [Hq, T, D]
    keys = rotated_keys.float().repeat_interleave(heads_per_kv, dim=1).transpose(0, 1)  # [Hq, S, D]
    values = rotated_values.float().repeat_interleave(heads_per_kv, dim=1).transpose(0, 1)  # [Hq, S, D]
    scores = rotated_query @ keys.transpose(1, 2) * head_dim**-0.5  # [Hq, T, S]
    if causal:
        query_positions = torch.arange(num_keys - num_queries, num_keys, device=query.device)
        key_positions = torch.arange(num_keys, device=query.device)
        scores = scores.masked_fill(key_positions[None, :] > query_positions[:, None], float("-inf"))
    rotated_output = torch.softmax(scores, dim=-1) @ values  # [Hq, T, D]
    return codec.out_of_rotated_space(rotated_output.transpose(0, 1)).to(query.dtype)


def tkv_attention(
    query: torch.Tensor,
    encoded_keys: QuantizedGroups,
    encoded_values: QuantizedGroups,
    codec: TkvLayerCodec,
    causal: bool = True,
    sink_keys: torch.Tensor | None = None,
    sink_values: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of query [T, Hq, D] over a TKV cache: the fp16 sink prefix sink_keys/sink_values [S0, Hkv, D]
    (model space; positions 0..S0-1) followed by the encoded tokens [S, Hkv, D] (positions S0..S0+S-1)."""
    rotated_keys = codec.decode_keys_rotated(encoded_keys)  # [S, Hkv, D]
    rotated_values = codec.decode_values_rotated(encoded_values)
    if (sink_keys is None) != (sink_values is None):
        raise InvalidArgumentError("sink", "sink keys and sink values come together")
    if sink_keys is not None and sink_values is not None:
        rotated_keys = torch.cat([codec.into_rotated_space(sink_keys.float()), rotated_keys])  # [S0 + S, Hkv, D]
        rotated_values = torch.cat([codec.into_rotated_space(sink_values.float()), rotated_values])
    return rotated_space_attention(query, rotated_keys, rotated_values, codec, causal)
