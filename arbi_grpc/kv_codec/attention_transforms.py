"""The torch steps every TKV attention backend runs around its kernel: the query into the key code space, and
the attention output from the value code space back to model space (docs/tkv.md, "Engine integration").

With c the stored key codes' values (c = (H k - m_k) * s_k): q.k = ((H q) / s_k) . c + (H q) . m_k, and the
last term is the same for every key of a query, so softmax drops it. Values: sum_j p_j v_j = H (acc / s_v +
m_v) with acc = sum_j p_j c^v_j, because the weights p_j sum to 1.
"""

from __future__ import annotations

import torch
from torch import Tensor

from arbi_grpc.kv_codec.hadamard import hadamard_rotate
from arbi_grpc.kv_codec.paged_cache import TkvLayerStorage


def _per_query_head(per_kv_head: Tensor, num_heads: int) -> Tensor:
    """[Hkv, D] -> [Hq, D]: query head h reads kv head h // (Hq / Hkv)."""
    return per_kv_head.repeat_interleave(num_heads // per_kv_head.shape[0], dim=0)


def transform_queries(query: Tensor, storage: TkvLayerStorage) -> Tensor:
    """q' = (H q) / s_k: query [T, Hq, D] in model space -> fp32 [T, Hq, D] scored against decoded codes."""
    rotated = hadamard_rotate(query.float()) if storage.rotate else query.float()
    return rotated / _per_query_head(storage.key_channel_scale, query.shape[1])


def transform_output(accumulated: Tensor, storage: TkvLayerStorage, dtype: torch.dtype) -> Tensor:
    """o = H (acc / s_v + m_v): attention output [T, Hq, D] in the value code space -> model space, `dtype`."""
    num_heads = accumulated.shape[1]
    rotated = accumulated.float() / _per_query_head(storage.value_channel_scale, num_heads) + _per_query_head(
        storage.value_shift, num_heads
    )
    return (hadamard_rotate(rotated) if storage.rotate else rotated).to(dtype)
