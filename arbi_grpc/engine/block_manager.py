"""KV cache block accounting: a pool of fixed-size blocks with reference counts, and per-sequence tables.

Blocks are only ids here; the tensors live in the model's paged KV cache. A block is in exactly one of
three states: referenced (ref count > 0), evictable (ref count 0 but still holding a prefix-cache entry,
kept in LRU order), or free. Allocation takes free blocks first and evicts the least recently released
evictable block only when none is free, so cached prefixes live until memory is actually needed.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable


class BlockPool:
    """Free list, evictable LRU and reference counts of `num_blocks` KV blocks."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise ValueError(f"a KV block pool needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self._evictable: OrderedDict[int, None] = OrderedDict()  # oldest release first
        self._ref_counts = [0] * num_blocks
        # Set by the prefix cache: is a block registered, and how to drop its entry on eviction.
        self.is_cached: Callable[[int], bool] = lambda block: False
        self.on_evict: Callable[[int], None] = lambda block: None
        self.num_evictions = 0

    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation can take now: free plus evictable."""
        return len(self._free) + len(self._evictable)

    @property
    def num_evictable_blocks(self) -> int:
        return len(self._evictable)

    def allocate(self, count: int) -> list[int]:
        """Takes `count` blocks, each with reference count 1, evicting cached ones only if needed."""
        if count > self.num_free_blocks:
            raise RuntimeError(f"asked for {count} KV blocks, {self.num_free_blocks} free")
        blocks = []
        for _ in range(count):
            if self._free:
                block = self._free.popleft()
            else:
                block, _ = self._evictable.popitem(last=False)
                self.num_evictions += 1
                self.on_evict(block)
            self._ref_counts[block] = 1
            blocks.append(block)
        return blocks

    def retain(self, block: int) -> None:
        """Adds a reference to a block in use or to an evictable cached block."""
        if self._ref_counts[block] == 0:
            if block not in self._evictable:
                raise RuntimeError(f"KV block {block} is free and cannot be shared")
            del self._evictable[block]
        self._ref_counts[block] += 1

    def release(self, blocks: Iterable[int]) -> None:
        """Drops one reference from each block; at zero a cached block becomes evictable, others free."""
        for block in blocks:
            if self._ref_counts[block] <= 0:
                raise RuntimeError(f"KV block {block} released more often than taken")
            self._ref_counts[block] -= 1
            if self._ref_counts[block] == 0:
                if self.is_cached(block):
                    self._evictable[block] = None
                else:
                    self._free.append(block)

    def release_evictable(self, block: int) -> None:
        """Moves an evictable block to the free list (its cache entry was dropped)."""
        if block in self._evictable:
            del self._evictable[block]
            self._free.append(block)

    def ref_count(self, block: int) -> int:
        return self._ref_counts[block]

    def check_invariants(self) -> None:
        """Raises if a block is in two states at once or a count is negative (tests and debugging)."""
        free, evictable = set(self._free), set(self._evictable)
        if len(free) != len(self._free):
            raise AssertionError("a block is twice on the free list")
        if free & evictable:
            raise AssertionError(f"blocks both free and evictable: {sorted(free & evictable)}")
        for block, count in enumerate(self._ref_counts):
            if count < 0:
                raise AssertionError(f"block {block} has ref count {count}")
            if count > 0 and (block in free or block in evictable):
                raise AssertionError(f"block {block} is referenced ({count}) and free")
            if count == 0 and block not in free and block not in evictable:
                raise AssertionError(f"block {block} is unreferenced and lost")


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
        """Releases every block of a table, last block first, and empties it.

        Releasing the tail first puts a cached chain's deepest blocks at the front of the eviction order,
        so a prefix is evicted from its end and its head stays reachable longest.
        """
        self.pool.release(reversed(block_table))
        block_table.clear()
