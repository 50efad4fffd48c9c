"""The FlashInfer backend's own part, on the CPU: the KV write, one plan per step, the wrapper each step goes to,
and the page lists and flat token order it hands over. FlashInfer is replaced by wrappers that compute its
documented semantics in torch (CSR page lists, last-page lengths, a chunk's queries causal at the end of their
context); the real kernels are checked on the GPU (tests/gpu/test_flashinfer_backend.py).
"""

from __future__ import annotations

import random
import sys
import types

import pytest
import torch
from torch import Tensor

from arbi_grpc.attention.flashinfer_paged import FlashInferPagedAttention
from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.attention.torch_paged import TorchPagedAttention
from tests.unit.models.paged_harness import PagedStepRunner, chunked_schedule


def _paged_causal_attention(query: Tensor, key_cache: Tensor, value_cache: Tensor, query_indptr: Tensor,
                            page_indptr: Tensor, page_ids: Tensor, last_page_len: Tensor, scale: float) -> Tensor:
    """FlashInfer's paged attention as its docstrings define it, one sequence at a time."""
    page_size = key_cache.shape[1]
    outputs = []
    for b in range(len(page_indptr) - 1):
        pages = page_ids[page_indptr[b]: page_indptr[b + 1]].long()
        kv_len = (len(pages) - 1) * page_size + int(last_page_len[b])
        queries = query[query_indptr[b]: query_indptr[b + 1]].float()  # [q, H, D]
        group = queries.shape[1] // key_cache.shape[2]
        key, value = (cache[pages].flatten(0, 1)[:kv_len].float().repeat_interleave(group, dim=1)
                      for cache in (key_cache, value_cache))  # [kv_len, H, D]
        scores = torch.einsum("qhd,khd->hqk", queries, key) * scale
        query_positions = torch.arange(kv_len - len(queries), kv_len)
        scores = scores.masked_fill(torch.arange(kv_len)[None, :] > query_positions[:, None], float("-inf"))
        outputs.append(torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), value).to(query.dtype))
    return torch.cat(outputs)


class _Wrapper:
    """What both fake wrappers share: the NHD layout, the plan's host arrays, `run` over the (K, V) tensors."""

    def __init__(self, workspace: Tensor, kv_layout: str, **options: object) -> None:
        assert kv_layout == "NHD" and options.get("backend") == "fa2"
        self.plans: list[int] = []  # batch size of each plan

    def _keep(self, query_indptr: Tensor, page_indptr: Tensor, page_ids: Tensor, last_page_len: Tensor,
              page_size: int, sm_scale: float) -> None:
        for host in (query_indptr, page_indptr, last_page_len):
            assert host.device.type == "cpu" and host.dtype == torch.int32
        assert page_ids.dtype == torch.int32
        self.arrays = (query_indptr, page_indptr, page_ids, last_page_len)
        self.page_size, self.scale = page_size, sm_scale
        self.plans.append(len(last_page_len))

    def run(self, query: Tensor, paged_kv_cache: tuple[Tensor, Tensor]) -> Tensor:
        key_cache, value_cache = paged_kv_cache
        assert key_cache.shape[1] == self.page_size
        return _paged_causal_attention(query, key_cache, value_cache, *self.arrays, self.scale)


class _DecodeWrapper(_Wrapper):
    def plan(self, indptr: Tensor, indices: Tensor, last_page_len: Tensor, num_qo_heads: int, num_kv_heads: int,
             head_dim: int, page_size: int, *, q_data_type: torch.dtype, kv_data_type: torch.dtype,
             sm_scale: float) -> None:
        self._keep(torch.arange(len(last_page_len) + 1, dtype=torch.int32), indptr, indices, last_page_len,
                   page_size, sm_scale)


class _PrefillWrapper(_Wrapper):
    def plan(self, qo_indptr: Tensor, paged_kv_indptr: Tensor, paged_kv_indices: Tensor,
             paged_kv_last_page_len: Tensor, num_qo_heads: int, num_kv_heads: int, head_dim_qk: int, page_size: int,
             *, causal: bool, seq_lens: Tensor, q_data_type: torch.dtype, kv_data_type: torch.dtype,
             sm_scale: float) -> None:
        assert causal
        self._keep(qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, page_size, sm_scale)


@pytest.fixture
def fake_flashinfer(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("flashinfer")
    module.BatchDecodeWithPagedKVCacheWrapper = _DecodeWrapper
    module.BatchPrefillWithPagedKVCacheWrapper = _PrefillWrapper
    monkeypatch.setitem(sys.modules, "flashinfer", module)


@pytest.mark.parametrize(("heads", "kv_heads", "block_size"), [(4, 4, 4), (8, 2, 16)])
def test_steps_match_the_torch_backend_with_one_plan_each(fake_flashinfer: None, heads: int, kv_heads: int,
                                                          block_size: int, rng: random.Random,
                                                          torch_generator: torch.Generator) -> None:
    head_dim, num_layers = 16, 2
    backend = FlashInferPagedAttention.for_dtypes("bfloat16", "bfloat16")
    reference = TorchPagedAttention()
    caches = [PagedKVCache(num_layers=num_layers, num_blocks=64, block_size=block_size, num_kv_heads=kv_heads,
                           head_dim=head_dim, dtype=torch.float32, device="cpu") for _ in range(2)]
    runner = PagedStepRunner(block_size=block_size, num_blocks=64, rng=rng)
    steps = chunked_schedule(rng, [rng.randint(2, 40) for _ in range(4)], decode_steps=3)  # prefill, mixed, decodes
    for step in steps:
        metadata, _, _ = runner.plan_step(step)
        for layer in range(num_layers):
            query, key, value = (torch.randn((metadata.num_tokens, n, head_dim), generator=torch_generator)
                                 for n in (heads, kv_heads, kv_heads))
            actual = backend.forward(layer, query, key, value, metadata, caches[0])
            expected = reference.forward(layer, query, key, value, metadata, caches[1])
            torch.testing.assert_close(actual, expected)
            assert all(torch.equal(a, b) for a, b in zip(caches[0].layer(layer), caches[1].layer(layer)))
    decode_steps = [step for step in steps if all(new_tokens == 1 for _, new_tokens in step)]
    assert backend._decode.plans == [len(step) for step in decode_steps]
    assert backend._prefill.plans == [len(step) for step in steps if step not in decode_steps]
