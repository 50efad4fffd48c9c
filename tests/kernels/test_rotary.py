"""Rotary embedding (neox halves) against the torch reference and against the rotation's own properties."""

from __future__ import annotations

import pytest
import torch

from arbi_kernels import HeadNorms, apply_rotary_embedding, build_rotary_cache
from tests.kernels.paged_batches import tolerance
from tests.kernels.reference import rotary_embedding_reference


def _random(size, dtype, device, generator) -> torch.Tensor:
    return torch.randn(size, generator=generator).to(device=device, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("num_heads", "num_kv_heads", "head_dim"), [(9, 3, 64), (8, 1, 128), (4, 4, 32)])
def test_in_place_rotation_matches_reference(dtype, num_heads, num_kv_heads, head_dim, device, generator):
    num_tokens, max_position = int(torch.randint(1, 24, (1,), generator=generator)), 500
    cos, sin = build_rotary_cache(max_position, head_dim, 10000.0, device)
    positions = torch.randint(0, max_position, (num_tokens,), generator=generator).to(device)
    query = _random((num_tokens, num_heads, head_dim), dtype, device, generator)
    key = _random((num_tokens, num_kv_heads, head_dim), dtype, device, generator)
    expected_query, expected_key = query.clone(), key.clone()
    apply_rotary_embedding(positions, query, key, cos, sin)
    rotary_embedding_reference(positions, expected_query, expected_key, cos, sin)
    torch.testing.assert_close(query, expected_query, **tolerance(dtype))
    torch.testing.assert_close(key, expected_key, **tolerance(dtype))


def test_views_of_fused_qkv_and_partial_rotary(device, generator):
    """q and k as strided views of one QKV buffer; only the first rotary_dim dims turn, V is untouched."""
    num_tokens, head_dim, rotary_dim = 5, 64, 32
    qkv = _random((num_tokens, (4 + 2 + 2) * head_dim), torch.float32, device, generator)
    original = qkv.clone()
    query = qkv[:, : 4 * head_dim].view(num_tokens, 4, head_dim)
    key = qkv[:, 4 * head_dim : 6 * head_dim].view(num_tokens, 2, head_dim)
    cos, sin = build_rotary_cache(64, rotary_dim, 500000.0, device)
    positions = torch.randint(0, 64, (num_tokens,), generator=generator, dtype=torch.int64).to(torch.int32).to(device)
    apply_rotary_embedding(positions, query, key, cos, sin)
    expected = original.clone()
    rotary_embedding_reference(
        positions, expected[:, : 4 * head_dim].view(num_tokens, 4, head_dim),
        expected[:, 4 * head_dim : 6 * head_dim].view(num_tokens, 2, head_dim), cos, sin,
    )
    torch.testing.assert_close(qkv, expected, **tolerance(torch.float32))
    assert torch.equal(qkv[:, 6 * head_dim :], original[:, 6 * head_dim :])
    original_query = original[:, : 4 * head_dim].view(num_tokens, 4, head_dim)
    assert torch.equal(query[..., rotary_dim:], original_query[..., rotary_dim:])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("num_heads", "num_kv_heads", "head_dim"), [(16, 8, 128), (6, 2, 64)])
def test_head_norms_before_rotation_match_reference(dtype, num_heads, num_kv_heads, head_dim, device, generator):
    """Qwen3's q_norm/k_norm fused into the rotation, on strided views of one QKV buffer."""
    num_tokens = int(torch.randint(1, 12, (1,), generator=generator))
    width = (num_heads + 2 * num_kv_heads) * head_dim
    qkv = (3.0 * _random((num_tokens, width), torch.float32, device, generator)).to(dtype)
    expected = qkv.clone()
    weights = [1.0 + 0.5 * _random((head_dim,), dtype, device, generator) for _ in range(2)]
    cos, sin = build_rotary_cache(300, head_dim, 1000000.0, device)
    positions = torch.randint(0, 300, (num_tokens,), generator=generator).to(device)

    def views(buffer):
        query = buffer[:, : num_heads * head_dim].view(num_tokens, num_heads, head_dim)
        key = buffer[:, num_heads * head_dim : (num_heads + num_kv_heads) * head_dim]
        return query, key.view(num_tokens, num_kv_heads, head_dim)

    apply_rotary_embedding(positions, *views(qkv), cos, sin, head_norms=HeadNorms(*weights, 1e-6))
    rotary_embedding_reference(positions, *views(expected), cos, sin, head_norms=(*weights, 1e-6))
    torch.testing.assert_close(qkv, expected, **tolerance(dtype))
    query_rms = views(qkv)[0].float().pow(2).mean(dim=-1).sqrt()  # rotation keeps the normalized length
    expected_rms = weights[0].float().pow(2).mean().sqrt().expand_as(query_rms)
    assert not torch.allclose(query_rms, torch.ones_like(query_rms), atol=0.05)
    torch.testing.assert_close(query_rms, expected_rms, rtol=0.5, atol=0.5)


def test_head_norms_refuse_partial_rotary_and_bad_weights():
    positions, query, key = torch.zeros(2, dtype=torch.int64), torch.zeros(2, 4, 64), torch.zeros(2, 2, 64)
    cos, sin = torch.zeros(10, 16), torch.zeros(10, 16)
    with pytest.raises(NotImplementedError, match="partial rotary"):
        apply_rotary_embedding(positions, query, key, cos, sin, head_norms=HeadNorms(torch.ones(64), torch.ones(64), 1e-6))
    cos, sin = torch.zeros(10, 32), torch.zeros(10, 32)
    with pytest.raises(ValueError, match="key_weight: expected shape"):
        apply_rotary_embedding(positions, query, key, cos, sin, head_norms=HeadNorms(torch.ones(64), torch.ones(32), 1e-6))
    with pytest.raises(ValueError, match="eps"):
        apply_rotary_embedding(positions, query, key, cos, sin, head_norms=HeadNorms(torch.ones(64), torch.ones(64), 0.0))


def test_rotation_keeps_norms_and_makes_scores_depend_on_distance(device, generator):
    """RoPE's defining property: <R(m)q, R(n)k> depends only on m - n, and each rotation keeps the norm."""
    head_dim = 64
    cos, sin = build_rotary_cache(256, head_dim, 10000.0, device)
    base_query = _random((1, 1, head_dim), torch.float32, device, generator)
    base_key = _random((1, 1, head_dim), torch.float32, device, generator)
    offset = int(torch.randint(1, 100, (1,), generator=generator))
    scores = []
    for query_position in (offset + 7, offset + 107):
        query, key = base_query.clone(), base_key.clone()
        apply_rotary_embedding(
            torch.tensor([query_position], device=device), query, query.clone(), cos, sin
        )
        apply_rotary_embedding(torch.tensor([query_position - 7], device=device), key, key.clone(), cos, sin)
        torch.testing.assert_close(query.norm(), base_query.norm())
        scores.append(float((query * key).sum()))
    assert scores[0] == pytest.approx(scores[1], rel=1e-4, abs=1e-4)


def test_cache_matches_closed_form():
    cos, sin = build_rotary_cache(10, 8, 100.0)
    assert cos.shape == (10, 4) and sin.dtype == torch.float32
    torch.testing.assert_close(cos[3, 1], torch.tensor(3 * 100.0 ** (-2 / 8)).cos())
    torch.testing.assert_close(sin[7, 3], torch.tensor(7 * 100.0 ** (-6 / 8)).sin())


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"key": torch.zeros(3, 2, 32)}, "key: expected shape"),
        ({"key": torch.zeros(3, 2, 64, dtype=torch.float16)}, "key: dtype must match query"),
        ({"positions": torch.zeros(3, dtype=torch.float32)}, "positions: dtype"),
        ({"positions": torch.zeros(4, dtype=torch.int64)}, "positions: expected shape"),
        ({"cos_cache": torch.zeros(10, 40), "sin_cache": torch.zeros(10, 40)}, "rotary_dim 2 \\* 40"),
        ({"sin_cache": torch.zeros(11, 32)}, "sin_cache: expected shape"),
    ],
)
def test_rejects_bad_arguments(arguments, message):
    defaults = {
        "positions": torch.zeros(3, dtype=torch.int64), "query": torch.zeros(3, 4, 64), "key": torch.zeros(3, 2, 64),
        "cos_cache": torch.zeros(10, 32), "sin_cache": torch.zeros(10, 32),
    }
    with pytest.raises(ValueError, match=message):
        apply_rotary_embedding(**(defaults | arguments))


def test_cache_builder_rejects_odd_dims():
    with pytest.raises(ValueError, match="rotary_dim"):
        build_rotary_cache(10, 7, 10000.0)
