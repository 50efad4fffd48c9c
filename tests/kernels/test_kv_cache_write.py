"""KV write by slot against the torch reference: scattered slots, padding slots, strided inputs."""

from __future__ import annotations

import pytest
import torch

from arbi_kernels import write_kv_cache
from tests.kernels.reference import write_kv_cache_reference


def _random(size, dtype, device, generator) -> torch.Tensor:
    return torch.randn(size, generator=generator).to(device=device, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("num_kv_heads", "head_dim", "page_size"), [(1, 64, 16), (3, 64, 32), (8, 128, 16)])
def test_scatter_matches_reference(dtype, num_kv_heads, head_dim, page_size, device, generator):
    num_blocks, num_tokens = 6, int(torch.randint(1, 40, (1,), generator=generator))
    cache_shape = (num_blocks, page_size, num_kv_heads, head_dim)
    key_cache = _random(cache_shape, dtype, device, generator)
    value_cache = _random(cache_shape, dtype, device, generator)
    expected_key, expected_value = key_cache.clone(), value_cache.clone()
    key = _random((num_tokens, num_kv_heads, head_dim), dtype, device, generator)
    value = _random((num_tokens, num_kv_heads, head_dim), dtype, device, generator)
    slots = torch.randperm(num_blocks * page_size, generator=generator)[:num_tokens]
    slots[torch.rand(num_tokens, generator=generator) < 0.2] = -1  # padding tokens
    slots = slots.to(device)

    write_kv_cache(key, value, key_cache, value_cache, slots)
    write_kv_cache_reference(key, value, expected_key, expected_value, slots)
    assert torch.equal(key_cache, expected_key)
    assert torch.equal(value_cache, expected_value)


def test_reads_key_and_value_through_their_strides(device, generator):
    """K and V sliced out of a fused QKV output: token stride larger than Hkv * D."""
    qkv = _random((7, (4 + 2 + 2) * 64), torch.float16, device, generator)
    key = qkv[:, 4 * 64 : 6 * 64].view(7, 2, 64)
    value = qkv[:, 6 * 64 :].view(7, 2, 64)
    key_cache = torch.zeros((2, 16, 2, 64), dtype=torch.float16, device=device)
    value_cache = torch.zeros_like(key_cache)
    slots = torch.randperm(32, generator=generator)[:7].to(device)
    write_kv_cache(key, value, key_cache, value_cache, slots)
    assert torch.equal(key_cache.flatten(0, 1)[slots], key)
    assert torch.equal(value_cache.flatten(0, 1)[slots], value)


def test_empty_batch_is_a_no_op(device):
    key_cache = torch.zeros((2, 16, 2, 64), dtype=torch.float16, device=device)
    empty = torch.zeros((0, 2, 64), dtype=torch.float16, device=device)
    write_kv_cache(empty, empty, key_cache, key_cache.clone(), torch.zeros(0, dtype=torch.int64, device=device))
    assert torch.count_nonzero(key_cache) == 0


@pytest.mark.parametrize(
    ("field", "bad_value", "message"),
    [
        ("key", torch.zeros(3, 4, 64, dtype=torch.float16), "key: expected shape"),
        ("value", torch.zeros(2, 2, 64, dtype=torch.float16), "value: expected shape"),
        ("key", torch.zeros(3, 2, 64, dtype=torch.float32), "key: dtype must match key_cache"),
        ("slot_mapping", torch.zeros(3, dtype=torch.int32), "slot_mapping: dtype"),
        ("slot_mapping", torch.zeros(4, dtype=torch.int64), "slot_mapping: expected shape"),
        ("value_cache", torch.zeros(2, 16, 2, 64, dtype=torch.float16).transpose(0, 1).contiguous().transpose(0, 1),
         "value_cache: strides must equal"),
    ],
)
def test_rejects_bad_arguments(field, bad_value, message):
    arguments = {
        "key": torch.zeros(3, 2, 64, dtype=torch.float16), "value": torch.zeros(3, 2, 64, dtype=torch.float16),
        "key_cache": torch.zeros(2, 16, 2, 64, dtype=torch.float16),
        "value_cache": torch.zeros(2, 16, 2, 64, dtype=torch.float16),
        "slot_mapping": torch.zeros(3, dtype=torch.int64),
    }
    with pytest.raises(ValueError, match=message):
        write_kv_cache(**(arguments | {field: bad_value}))
