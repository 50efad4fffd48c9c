"""Plain torch references for every kernel in this package: slow, obvious, computed in float32.

Tests and the benchmark compare each Triton kernel against the function here with the same name minus the
`_reference` suffix. Semantics (rounding points, masking, padding conventions) are defined here.
"""

from __future__ import annotations

import torch


def _gather_context(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """The first `length` cached tokens of one sequence, in order: [length, num_kv_heads, head_dim]."""
    block_size = cache.shape[1]
    num_blocks = (length + block_size - 1) // block_size
    blocks = cache[block_table[:num_blocks].long()]  # [num_blocks, block_size, Hkv, D]
    return blocks.flatten(0, 1)[:length]


def _causal_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, softmax_scale: float
) -> torch.Tensor:
    """query [q_len, Hq, D] sits at the last q_len positions of key/value [ctx_len, Hkv, D]."""
    q_len, num_heads, _ = query.shape
    ctx_len, num_kv_heads, _ = key.shape
    group_size = num_heads // num_kv_heads
    key = key.float().repeat_interleave(group_size, dim=1)  # [ctx, Hq, D]
    value = value.float().repeat_interleave(group_size, dim=1)
    scores = torch.einsum("qhd,khd->hqk", query.float(), key) * softmax_scale  # [Hq, q_len, ctx]
    query_positions = torch.arange(ctx_len - q_len, ctx_len, device=query.device)
    key_positions = torch.arange(ctx_len, device=query.device)
    visible = key_positions[None, :] <= query_positions[:, None]  # [q_len, ctx]
    scores = scores.masked_fill(~visible, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("hqk,khd->qhd", weights, value)  # [q_len, Hq, D]


def paged_prefill_attention_reference(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
) -> torch.Tensor:
    """Varlen causal attention over the paged cache; the new tokens' K/V must already be in the cache."""
    output = torch.empty_like(query)
    starts = query_start_loc.tolist()
    for seq, seq_len in enumerate(seq_lens.tolist()):
        begin, end = starts[seq], starts[seq + 1]
        if end == begin:
            continue
        key = _gather_context(key_cache, block_tables[seq], seq_len)
        value = _gather_context(value_cache, block_tables[seq], seq_len)
        output[begin:end] = _causal_attention(query[begin:end], key, value, softmax_scale).to(query.dtype)
    return output


def paged_decode_attention_reference(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
) -> torch.Tensor:
    """One query per sequence (query [B, Hq, D]) at position seq_len - 1; a zero seq_len gives zeros."""
    output = torch.zeros_like(query)
    for seq, seq_len in enumerate(seq_lens.tolist()):
        if seq_len == 0:
            continue
        key = _gather_context(key_cache, block_tables[seq], seq_len)
        value = _gather_context(value_cache, block_tables[seq], seq_len)
        output[seq] = _causal_attention(query[seq : seq + 1], key, value, softmax_scale)[0].to(query.dtype)
    return output


def write_kv_cache_reference(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Scatter key/value [T, Hkv, D] into the caches at flat slots; a negative slot skips the token."""
    kept = slot_mapping >= 0
    slots = slot_mapping[kept]
    key_cache.flatten(0, 1)[slots] = key[kept]
    value_cache.flatten(0, 1)[slots] = value[kept]


def rms_norm_reference(
    hidden: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(normalized, new residual): the sum hidden + residual is rounded to hidden's dtype, then normalized."""
    summed = hidden if residual is None else (hidden.float() + residual.float()).to(hidden.dtype)
    values = summed.float()
    inverse_rms = torch.rsqrt(values.pow(2).mean(dim=-1, keepdim=True) + eps)
    normalized = (values * inverse_rms * weight.float()).to(hidden.dtype)
    return normalized, summed


def rotary_embedding_reference(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_cache: torch.Tensor,
    sin_cache: torch.Tensor,
    head_norms: tuple[torch.Tensor, torch.Tensor, float] | None = None,
) -> None:
    """In place, neox/HF halves rotation of the first 2 * cos_cache.shape[1] dims of every head; with
    `head_norms` (query weight, key weight, eps) each head is RMS-normalized over its dims first (float32)."""
    half = cos_cache.shape[1]
    cos = cos_cache[positions.long()].float()[:, None, :]  # [T, 1, half]
    sin = sin_cache[positions.long()].float()[:, None, :]
    weights = (None, None) if head_norms is None else head_norms[:2]
    for tensor, weight in zip((query, key), weights):
        values = tensor.float()
        if weight is not None:
            inverse_rms = torch.rsqrt(values.pow(2).mean(dim=-1, keepdim=True) + head_norms[2])
            values = values * inverse_rms * weight.float()
        first = values[..., :half]
        second = values[..., half : 2 * half]
        rotated_first = first * cos - second * sin
        rotated_second = second * cos + first * sin
        tensor[..., :half] = rotated_first.to(tensor.dtype)
        tensor[..., half : 2 * half] = rotated_second.to(tensor.dtype)


def silu_and_mul_reference(gate_up: torch.Tensor) -> torch.Tensor:
    """[T, 2I] -> [T, I]: silu(gate) * up with gate the first half, rounded once."""
    intermediate = gate_up.shape[-1] // 2
    gate = gate_up[..., :intermediate].float()
    up = gate_up[..., intermediate:].float()
    return (torch.nn.functional.silu(gate) * up).to(gate_up.dtype)


def skinny_matmul_reference(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """x [M, K] @ weight[N, K]^T (+ bias [N]) in float32, rounded once to x's dtype."""
    product = x.float() @ weight.float().T
    if bias is not None:
        product = product + bias.float()
    return product.to(x.dtype)
