"""BlockPool and BlockManager: allocation, reference counts and refusal when blocks run out."""

from __future__ import annotations

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
