"""PrefixCache held by a BlockManager: hits confirmed by tokens, tenant namespaces, LRU eviction under pressure
only, and flush."""

from __future__ import annotations

import random

import pytest

from arbi_grpc.engine.block_manager import BlockManager
from arbi_grpc.engine.prefix_cache import PrefixCache
from arbi_grpc.engine.request import GenerationRequest, SchedulingParams
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.engine.sequence import Sequence

BLOCK = 4


def _cache(num_blocks: int = 8) -> tuple[BlockManager, PrefixCache]:
    cache = PrefixCache(BLOCK)
    return BlockManager(num_blocks, BLOCK, prefix_cache=cache), cache


def _sequence(namespace: str, tokens: list[int]) -> Sequence:
    request = GenerationRequest(
        request_id="r", prompt_token_ids=tuple(tokens), sampling=SamplingParams(),
        stopping=StoppingParams(max_output_tokens=1), scheduling=SchedulingParams(tenant=namespace),
    )
    return Sequence(request=request, sink=lambda _: None, sampling_state=None, detokenizer=None, stop_matcher=None)


def _fill(pool: BlockManager, cache: PrefixCache, namespace: str, tokens: list[int]) -> list[int]:
    """Allocates and registers blocks for `tokens` (whole blocks) as a finished request would."""
    blocks = pool.allocate(len(tokens) // BLOCK)
    parent = cache.root_hash(namespace)
    for index, block in enumerate(blocks):
        parent = cache.register(namespace, parent, tuple(tokens[index * BLOCK:(index + 1) * BLOCK]), block)
    return blocks


def test_hit_reuses_the_longest_prefix() -> None:
    pool, cache = _cache()
    tokens = [random.randrange(1000) for _ in range(3 * BLOCK)]
    blocks = _fill(pool, cache, "a", tokens)
    pool.release(reversed(blocks))
    assert pool.num_evictable_blocks == 3 and pool.num_free_blocks == 8
    sequence = _sequence("a", tokens[: 2 * BLOCK] + [7] * BLOCK + [0])  # diverges in the third block
    assert pool.reuse_prefix(sequence) == 2 * BLOCK
    hit, hashes = sequence.block_table, sequence.block_hashes
    assert hit == blocks[:2] and len(hashes) == 2
    assert all(pool.ref_count(b) == 1 for b in hit)
    assert cache.stats.num_hit_tokens == 2 * BLOCK
    pool.check_invariants()


def test_tenants_never_share_blocks() -> None:
    pool, cache = _cache()
    tokens = list(range(2 * BLOCK))
    pool.release(_fill(pool, cache, "tenant-a", tokens))
    assert cache.match("tenant-b", tokens, max_blocks=2) == ([], [])
    assert cache.match("tenant-a", tokens, max_blocks=2)[0] != []
    assert cache.stats.hits_by_namespace == {"tenant-a": 2 * BLOCK}


def test_hash_collision_is_never_served(monkeypatch: pytest.MonkeyPatch) -> None:
    pool, cache = _cache()
    monkeypatch.setattr(PrefixCache, "chain", staticmethod(lambda parent, tokens: 42))
    pool.release(_fill(pool, cache, "a", [1, 2, 3, 4]))
    blocks, _ = cache.match("a", [9, 9, 9, 9, 5], max_blocks=1)
    assert blocks == []  # same hash, other tokens


def test_eviction_only_under_pressure_and_lru() -> None:
    pool, cache = _cache(num_blocks=4)
    old = _fill(pool, cache, "a", list(range(BLOCK)))
    new = _fill(pool, cache, "a", list(range(100, 100 + BLOCK)))
    pool.release(old)
    pool.release(new)
    pool.allocate(2)  # two free blocks exist: no eviction
    assert pool.num_evictions == 0 and cache.num_cached_blocks == 2
    pool.allocate(1)  # takes the least recently released cached block
    assert pool.num_evictions == 1
    assert cache.match("a", list(range(BLOCK)) + [0], max_blocks=1)[0] == []
    assert cache.match("a", list(range(100, 100 + BLOCK)) + [0], max_blocks=1)[0] == new
    pool.check_invariants()


def test_flush_frees_unreferenced_and_unindexes_referenced() -> None:
    pool, cache = _cache()
    kept = _fill(pool, cache, "a", list(range(2 * BLOCK)))
    released = _fill(pool, cache, "b", list(range(2 * BLOCK)))
    pool.release(released)
    assert pool.flush_prefix_cache("b") == 2
    assert pool.num_evictable_blocks == 0 and cache.num_cached_blocks == 2
    assert pool.flush_prefix_cache() == 2
    pool.release(kept)  # no longer cached: straight to the free list
    assert pool.num_evictable_blocks == 0 and pool.num_free_blocks == 8
    pool.check_invariants()
