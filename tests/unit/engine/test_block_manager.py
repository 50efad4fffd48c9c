"""BlockPool and BlockManager: allocation, reference counts, refusal when blocks run out, and sink-capable first
blocks (only the first num_sink_blocks ids may start a sequence) with eviction still in global LRU order."""

from __future__ import annotations

import random

import pytest

from arbi_grpc.engine.block_manager import BlockManager, BlockPool


def test_allocate_release_round_trip() -> None:
    pool = BlockPool(8)
    blocks = pool.allocate(5)
    assert len(set(blocks)) == 5 and pool.num_free_blocks == 3
    assert all(pool.ref_count(b) == 1 for b in blocks)
    pool.retain(blocks[0])
    pool.release(blocks)
    assert pool.num_free_blocks == 7 and pool.ref_count(blocks[0]) == 1
    pool.release([blocks[0]])
    assert pool.num_free_blocks == 8


def test_misuse_is_refused() -> None:
    pool = BlockPool(2)
    with pytest.raises(RuntimeError, match="asked for 3"):
        pool.allocate(3)
    with pytest.raises(RuntimeError, match="free and cannot be shared"):
        pool.retain(0)
    with pytest.raises(RuntimeError, match="released more often"):
        pool.release([1])
    with pytest.raises(ValueError):
        BlockPool(0)


def test_grow_is_all_or_nothing() -> None:
    manager = BlockManager(num_blocks=4, block_size=16)
    table: list[int] = []
    assert manager.grow(table, 17) and len(table) == 2
    assert manager.grow(table, 32) and len(table) == 2
    other: list[int] = []
    assert not manager.grow(other, 48)  # needs 3, 2 free
    assert other == [] and manager.num_free_blocks == 2
    manager.free(table)
    assert table == [] and manager.num_free_blocks == 4


def test_a_sequence_starts_on_a_sink_capable_block_and_growth_prefers_plain_ones() -> None:
    pool = BlockPool(6, num_sink_blocks=2)
    first = pool.allocate(3, starts_sequence=True)
    assert first[0] < 2 and all(block >= 2 for block in first[1:])
    assert all(block >= 2 for block in pool.allocate(2))  # plain blocks while any is free
    assert pool.allocate(1) == [1]  # then the free sink-capable one
    pool.check_invariants()


def test_a_start_without_a_sink_capable_block_is_refused_and_changes_nothing() -> None:
    manager = BlockManager(num_blocks=6, block_size=4, num_sink_blocks=1)
    first: list[int] = []
    assert manager.grow(first, 4) and first == [0]
    second: list[int] = []
    assert not manager.pool.can_start_sequence()
    assert not manager.grow(second, 4)  # five plain blocks free, none may start a sequence
    assert second == [] and manager.num_free_blocks == 5
    with pytest.raises(RuntimeError, match="sink-capable"):
        manager.pool.allocate(1, starts_sequence=True)
    assert manager.grow(first, 24) and len(first) == 6  # a started sequence still grows into plain blocks
    manager.free(first)
    assert manager.grow(second, 4) and second == [0]


def _cache_everything(pool: BlockPool, cached: set[int]) -> None:
    pool.is_cached = cached.__contains__
    pool.on_evict = cached.discard


def test_eviction_takes_the_globally_oldest_release_across_both_lists() -> None:
    pool = BlockPool(4, num_sink_blocks=2)
    cached = {0, 1, 2, 3}
    _cache_everything(pool, cached)
    start = pool.allocate(2, starts_sequence=True)  # [0, 2]
    other = pool.allocate(2, starts_sequence=True)  # [1, 3]
    pool.release([start[1]])  # plain block 2: the oldest release
    pool.release([other[0]])  # sink-capable block 1
    pool.release([start[0], other[1]])  # 0, then plain 3
    assert pool.allocate(1) == [2] and pool.allocate(1) == [1] and pool.allocate(1) == [0]
    assert pool.num_evictions == 3 and cached == {3}
    pool.check_invariants()


def test_a_start_evicts_the_oldest_sink_capable_block_even_when_a_plain_one_is_older() -> None:
    pool = BlockPool(4, num_sink_blocks=1)
    cached = {0, 1, 2, 3}
    _cache_everything(pool, cached)
    table = pool.allocate(4, starts_sequence=True)
    pool.release(reversed(table))  # plain 3, 2, 1 released before block 0
    assert pool.allocate(1, starts_sequence=True) == [0] and cached == {1, 2, 3}
    pool.check_invariants()


def test_random_walk_keeps_every_first_block_sink_capable() -> None:
    rng = random.Random(7)
    manager = BlockManager(num_blocks=24, block_size=4, num_sink_blocks=5)
    cached: set[int] = set()
    _cache_everything(manager.pool, cached)
    tables: list[list[int]] = []
    for _ in range(3000):
        action = rng.random()
        if action < 0.45:
            table: list[int] = []
            if manager.grow(table, rng.randint(1, 20)):
                tables.append(table)
            else:
                assert table == []
        elif action < 0.7 and tables:
            table = rng.choice(tables)
            manager.grow(table, len(table) * 4 + rng.randint(1, 8))
        elif tables:
            table = tables.pop(rng.randrange(len(tables)))
            cached.update(block for block in table if rng.random() < 0.5)  # some blocks stay evictable
            manager.free(table)
        manager.pool.check_invariants()
        assert all(table[0] < 5 for table in tables)
        assert manager.num_free_blocks + sum(map(len, tables)) == 24
    assert manager.pool.num_evictions > 0
