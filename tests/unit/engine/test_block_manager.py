"""BlockManager: allocation, reference counts, refusal when blocks run out, and first-capable blocks (only the first
num_first_blocks ids may start a sequence) with eviction still in global LRU order."""

from __future__ import annotations

import random

import pytest

from arbi_grpc.engine.block_manager import BlockManager
from arbi_grpc.engine.prefix_cache import PrefixCache


def test_allocate_release_round_trip() -> None:
    pool = BlockManager(8, block_size=4)
    blocks = pool.allocate(5)
    assert len(set(blocks)) == 5 and pool.num_free_blocks == 3
    assert all(pool.ref_count(b) == 1 for b in blocks)
    pool.retain(blocks[0])
    pool.release(blocks)
    assert pool.num_free_blocks == 7 and pool.ref_count(blocks[0]) == 1
    pool.release([blocks[0]])
    assert pool.num_free_blocks == 8


def test_misuse_is_refused() -> None:
    pool = BlockManager(2, block_size=4)
    with pytest.raises(RuntimeError, match="asked for 3"):
        pool.allocate(3)
    with pytest.raises(RuntimeError, match="free and cannot be shared"):
        pool.retain(0)
    with pytest.raises(RuntimeError, match="released more often"):
        pool.release([1])
    with pytest.raises(ValueError):
        BlockManager(0, block_size=4)


def _release(manager: BlockManager, table: list[int]) -> None:
    """Frees a table as `BlockManager.free` frees a sequence's: last block first, then empties it."""
    manager.release(reversed(table))
    table.clear()


def test_grow_is_all_or_nothing() -> None:
    manager = BlockManager(num_blocks=4, block_size=16)
    table: list[int] = []
    assert manager.grow(table, 17) and len(table) == 2
    assert manager.grow(table, 32) and len(table) == 2
    other: list[int] = []
    assert not manager.grow(other, 48)  # needs 3, 2 free
    assert other == [] and manager.num_free_blocks == 2
    _release(manager, table)
    assert table == [] and manager.num_free_blocks == 4


def test_a_sequence_starts_on_a_first_capable_block_and_growth_prefers_other_ones() -> None:
    pool = BlockManager(6, block_size=4, num_first_blocks=2)
    first = pool.allocate(3, starts_sequence=True)
    assert first[0] < 2 and all(block >= 2 for block in first[1:])
    assert all(block >= 2 for block in pool.allocate(2))  # other blocks while any is free
    assert pool.allocate(1) == [1]  # then the free first-capable one
    pool.check_invariants()


def test_a_start_without_a_first_capable_block_is_refused_and_changes_nothing() -> None:
    manager = BlockManager(num_blocks=6, block_size=4, num_first_blocks=1)
    first: list[int] = []
    assert manager.grow(first, 4) and first == [0]
    second: list[int] = []
    assert not manager.can_start_sequence()
    assert not manager.grow(second, 4)  # five other blocks free, none may start a sequence
    assert second == [] and manager.num_free_blocks == 5
    with pytest.raises(RuntimeError, match="may start a sequence"):
        manager.allocate(1, starts_sequence=True)
    assert manager.grow(first, 24) and len(first) == 6  # a started sequence still grows into other blocks
    _release(manager, first)
    assert manager.grow(second, 4) and second == [0]


def _cached_blocks(cache: PrefixCache) -> set[int]:
    return {block for block in range(64) if cache.holds(block)}


def _register(cache: PrefixCache, blocks: list[int]) -> None:
    """Indexes each block under its own one-token chain, so that releasing it leaves it evictable."""
    for block in blocks:
        cache.register("t", cache.root_hash("t"), (block,), block)


def test_eviction_takes_the_globally_oldest_release_across_both_lists() -> None:
    cache = PrefixCache(block_size=1)
    pool = BlockManager(4, block_size=1, num_first_blocks=2, prefix_cache=cache)
    start = pool.allocate(2, starts_sequence=True)  # [0, 2]
    other = pool.allocate(2, starts_sequence=True)  # [1, 3]
    _register(cache, [0, 1, 2, 3])
    pool.release([start[1]])  # other block 2: the oldest release
    pool.release([other[0]])  # first-capable block 1
    pool.release([start[0], other[1]])  # 0, then other block 3
    assert pool.allocate(1) == [2] and pool.allocate(1) == [1] and pool.allocate(1) == [0]
    assert pool.num_evictions == 3 and _cached_blocks(cache) == {3}
    pool.check_invariants()


def test_a_start_evicts_the_oldest_first_capable_block_even_when_another_one_is_older() -> None:
    cache = PrefixCache(block_size=1)
    pool = BlockManager(4, block_size=1, num_first_blocks=1, prefix_cache=cache)
    table = pool.allocate(4, starts_sequence=True)
    _register(cache, [0, 1, 2, 3])
    pool.release(reversed(table))  # other blocks 3, 2, 1 released before block 0
    assert pool.allocate(1, starts_sequence=True) == [0] and _cached_blocks(cache) == {1, 2, 3}
    pool.check_invariants()


def test_random_walk_keeps_every_first_block_first_capable() -> None:
    rng = random.Random(7)
    cache = PrefixCache(block_size=4)
    manager = BlockManager(num_blocks=24, block_size=4, num_first_blocks=5, prefix_cache=cache)
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
            _register(cache, [block for block in table if rng.random() < 0.5 and not cache.holds(block)])
            _release(manager, table)  # the registered blocks stay evictable
        manager.check_invariants()
        assert all(table[0] < 5 for table in tables)
        assert manager.num_free_blocks + sum(map(len, tables)) == 24
    assert manager.num_evictions > 0
