"""KV cache block accounting: a pool of fixed-size blocks with reference counts, and per-sequence tables.

Blocks are only ids here; the tensors live in the model's paged KV cache. Reference counts let several
sequences share a block (prefix sharing); a block returns to the free list when its count drops to zero.
"""

from __future__ import annotations

from collections import deque


class BlockPool:
    """Free list and reference counts of `num_blocks` KV blocks."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise ValueError(f"a KV block pool needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self._ref_counts = [0] * num_blocks

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def allocate(self, count: int) -> list[int]:
        """Takes `count` free blocks, each with reference count 1."""
        if count > len(self._free):
            raise RuntimeError(f"asked for {count} KV blocks, {len(self._free)} free")
        blocks = [self._free.popleft() for _ in range(count)]
        for block in blocks:
            self._ref_counts[block] = 1
        return blocks

    def retain(self, block: int) -> None:
        """Adds a reference to a block already in use."""
        if self._ref_counts[block] <= 0:
            raise RuntimeError(f"KV block {block} is free and cannot be shared")
        self._ref_counts[block] += 1

    def release(self, blocks: list[int]) -> None:
        """Drops one reference from each block; blocks reaching zero become free."""
        for block in blocks:
            if self._ref_counts[block] <= 0:
                raise RuntimeError(f"KV block {block} released more often than taken")
            self._ref_counts[block] -= 1
            if self._ref_counts[block] == 0:
                self._free.append(block)

    def ref_count(self, block: int) -> int:
        return self._ref_counts[block]


class BlockManager:
    """Grows and frees the block tables of sequences on top of a `BlockPool`."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.pool = BlockPool(num_blocks)
        self.block_size = block_size

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def num_total_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def capacity_tokens(self) -> int:
        return self.pool.num_blocks * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def grow(self, block_table: list[int], num_tokens: int) -> bool:
        """Extends `block_table` in place to hold `num_tokens`; False (and no change) if blocks run out."""
        missing = self.blocks_for(num_tokens) - len(block_table)
        if missing <= 0:
            return True
        if missing > self.pool.num_free_blocks:
            return False
        block_table.extend(self.pool.allocate(missing))
        return True

    def free(self, block_table: list[int]) -> None:
        """Releases every block of a table and empties it."""
        self.pool.release(block_table)
        block_table.clear()
