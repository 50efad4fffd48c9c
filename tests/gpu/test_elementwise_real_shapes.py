"""KV write, fused add + RMSNorm, rotary (with and without per-head norms) and SiLU-and-multiply, compiled, at
serving shapes."""

from __future__ import annotations

import pytest
import torch

from arbi_kernels import HeadNorms, apply_rotary_embedding, build_rotary_cache, rms_norm, silu_and_mul, write_kv_cache
from tests.kernels.paged_batches import tolerance
from tests.kernels.reference import (
    rms_norm_reference,
    rotary_embedding_reference,
    silu_and_mul_reference,
    write_kv_cache_reference,
)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def _random(size, dtype, generator) -> torch.Tensor:
    return torch.randn(size, generator=generator, device=generator.device).to(dtype)


@pytest.mark.parametrize(("num_kv_heads", "head_dim", "page_size"), [(3, 64, 16), (8, 128, 32)])
def test_kv_write(num_kv_heads, head_dim, page_size, generator):
    num_tokens, num_blocks = 8192, 1024
    cache_shape = (num_blocks, page_size, num_kv_heads, head_dim)
    key_cache = _random(cache_shape, torch.bfloat16, generator)
    value_cache = _random(cache_shape, torch.bfloat16, generator)
    expected_key, expected_value = key_cache.clone(), value_cache.clone()
    key = _random((num_tokens, num_kv_heads, head_dim), torch.bfloat16, generator)
    value = _random((num_tokens, num_kv_heads, head_dim), torch.bfloat16, generator)
    slots = torch.randperm(num_blocks * page_size, generator=generator, device=generator.device)[:num_tokens]
    slots[torch.rand(num_tokens, generator=generator, device=generator.device) < 0.05] = -1
    write_kv_cache(key, value, key_cache, value_cache, slots)
    write_kv_cache_reference(key, value, expected_key, expected_value, slots)
    assert torch.equal(key_cache, expected_key) and torch.equal(value_cache, expected_value)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden_size", [576, 4096, 8192])
def test_fused_add_rms_norm(dtype, hidden_size, generator):
    hidden = _random((4096, hidden_size), dtype, generator)
    residual = _random((4096, hidden_size), dtype, generator)
    weight = _random((hidden_size,), dtype, generator)
    normalized, new_residual = rms_norm(hidden, weight, 1e-5, residual)
    expected_normalized, expected_residual = rms_norm_reference(hidden, weight, 1e-5, residual)
    torch.testing.assert_close(new_residual, expected_residual, **tolerance(dtype))
    torch.testing.assert_close(normalized, expected_normalized, **tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("num_heads", "num_kv_heads", "head_dim", "with_head_norms"),
                         [(9, 3, 64, False), (32, 8, 128, False), (16, 8, 128, True)])
def test_rotary(dtype, num_heads, num_kv_heads, head_dim, with_head_norms, generator):
    num_tokens, max_position = 4096, 32768
    weights = [1.0 + 0.5 * _random((head_dim,), dtype, generator) for _ in range(2)]
    head_norms = HeadNorms(*weights, 1e-6) if with_head_norms else None
    cos, sin = build_rotary_cache(max_position, head_dim, 100000.0, generator.device)
    positions = torch.randint(0, max_position, (num_tokens,), generator=generator, device=generator.device)
    qkv = _random((num_tokens, (num_heads + 2 * num_kv_heads) * head_dim), dtype, generator)
    query = qkv[:, : num_heads * head_dim].view(num_tokens, num_heads, head_dim)
    key = qkv[:, num_heads * head_dim : (num_heads + num_kv_heads) * head_dim].view(num_tokens, num_kv_heads, head_dim)
    expected_query, expected_key = query.clone(), key.clone()
    apply_rotary_embedding(positions, query, key, cos, sin, head_norms=head_norms)
    rotary_embedding_reference(positions, expected_query, expected_key, cos, sin,
                               head_norms=None if head_norms is None else tuple(head_norms))
    torch.testing.assert_close(query, expected_query, **tolerance(dtype))
    torch.testing.assert_close(key, expected_key, **tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("intermediate_size", [1536, 14336])
def test_silu_and_mul(dtype, intermediate_size, generator):
    gate_up = 4 * _random((4096, 2 * intermediate_size), dtype, generator)
    torch.testing.assert_close(silu_and_mul(gate_up), silu_and_mul_reference(gate_up), **tolerance(dtype))
