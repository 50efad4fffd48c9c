"""KV cache block accounting: a pool of fixed-size blocks with reference counts, and per-sequence tables.

Blocks are only ids here; the tensors live in the model's paged KV cache. A block is in exactly one of
three states: referenced (ref count > 0), evictable (ref count 0 but still holding a prefix-cache entry,
kept in LRU order), or free. Allocation takes free blocks first and evicts the least recently released
evictable block only when none is free, so cached prefixes live until memory is actually needed.

Only the first `num_sink_blocks` block ids are sink-capable: a TKV cache keeps a sink row (a sequence's first
tokens in fp16) for those blocks alone, so every sequence's first block comes from them. The free and evictable
lists are kept apart for sink-capable and plain blocks; ordinary growth takes plain blocks first, and each
evictable entry carries its release stamp so that eviction still takes the globally oldest block.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass
class _BlockLists:
    """Free blocks (FIFO) and evictable blocks (oldest release first, block -> release stamp) of one kind."""

    free: deque[int]
    evictable: OrderedDict[int, int] = field(default_factory=OrderedDict)

    @property
    def oldest_release(self) -> int | None:
        return next(iter(self.evictable.values()), None)

    def __len__(self) -> int:
        return len(self.free) + len(self.evictable)


class BlockPool:
    """Free lists, evictable LRU lists and reference counts of `num_blocks` KV blocks, of which the first
    `num_sink_blocks` (all of them when None: storage without sink rows) may start a sequence."""

    def __init__(self, num_blocks: int, num_sink_blocks: int | None = None) -> None:
        if num_blocks <= 0:
            raise ValueError(f"a KV block pool needs at least one block, got {num_blocks}")
        num_sink_blocks = num_blocks if num_sink_blocks is None else num_sink_blocks
        if not 0 < num_sink_blocks <= num_blocks:
            raise ValueError(f"num_sink_blocks must be in [1, {num_blocks}] (the pool's blocks), got {num_sink_blocks}")
        self.num_blocks = num_blocks
        self.num_sink_blocks = num_sink_blocks
        self._sink = _BlockLists(deque(range(num_sink_blocks)))
        self._plain = _BlockLists(deque(range(num_sink_blocks, num_blocks)))
        self._num_releases = 0  # stamps evictable entries, so the two LRU lists compare by age
        self._ref_counts = [0] * num_blocks
        # Set by the prefix cache: is a block registered, and how to drop its entry on eviction.
        self.is_cached: Callable[[int], bool] = lambda block: False
        self.on_evict: Callable[[int], None] = lambda block: None
        self.num_evictions = 0

    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation can take now: free plus evictable."""
        return len(self._sink) + len(self._plain)

    @property
    def num_evictable_blocks(self) -> int:
        return len(self._sink.evictable) + len(self._plain.evictable)

    def has_sink_row(self, block: int) -> bool:
        """Whether `block` may be a sequence's first block."""
        return block < self.num_sink_blocks

    def can_start_sequence(self) -> bool:
        """Whether a sequence's first block can be had now (a sink-capable block free or evictable)."""
        return len(self._sink) > 0

    def allocate(self, count: int, starts_sequence: bool = False) -> list[int]:
        """Takes `count` blocks, each with reference count 1, evicting cached ones only if none is free.

        With `starts_sequence` the first block returned is sink-capable. Other blocks are plain ones when any
        is free, then free sink-capable ones, and only then the least recently released evictable block.
        """
        if count > self.num_free_blocks:
            raise RuntimeError(f"asked for {count} KV blocks, {self.num_free_blocks} free")
        if starts_sequence and count and not self.can_start_sequence():
            raise RuntimeError(f"no sink-capable KV block (ids below {self.num_sink_blocks}) to start a sequence")
        blocks = [self._take(self._sink)] if starts_sequence and count else []
        while len(blocks) < count:
            blocks.append(self._take(self._plain if self._plain.free or not self._sink.free else self._sink))
        return blocks

    def _take(self, preferred: _BlockLists) -> int:
        """A free block of `preferred`, else its oldest evictable one, or for plain blocks the globally oldest."""
        if preferred.free:
            block = preferred.free.popleft()
        else:
            lists = preferred
            if preferred is self._plain and self._older(self._sink, self._plain):
                lists = self._sink
            block, _ = lists.evictable.popitem(last=False)
            self.num_evictions += 1
            self.on_evict(block)
        self._ref_counts[block] = 1
        return block

    @staticmethod
    def _older(first: _BlockLists, second: _BlockLists) -> bool:
        """Whether `first` holds the older evictable block of the two (False when it holds none)."""
        first_stamp, second_stamp = first.oldest_release, second.oldest_release
        return first_stamp is not None and (second_stamp is None or first_stamp < second_stamp)

    def _lists_of(self, block: int) -> _BlockLists:
        return self._sink if self.has_sink_row(block) else self._plain

    def retain(self, block: int) -> None:
        """Adds a reference to a block in use or to an evictable cached block."""
        if self._ref_counts[block] == 0:
            evictable = self._lists_of(block).evictable
            if block not in evictable:
                raise RuntimeError(f"KV block {block} is free and cannot be shared")
            del evictable[block]
        self._ref_counts[block] += 1

    def release(self, blocks: Iterable[int]) -> None:
        """Drops one reference from each block; at zero a cached block becomes evictable, others free."""
        for block in blocks:
            if self._ref_counts[block] <= 0:
                raise RuntimeError(f"KV block {block} released more often than taken")
            self._ref_counts[block] -= 1
            if self._ref_counts[block] == 0:
                lists = self._lists_of(block)
                if self.is_cached(block):
                    lists.evictable[block] = self._num_releases
                    self._num_releases += 1
                else:
                    lists.free.append(block)

    def release_evictable(self, block: int) -> None:
        """Moves an evictable block to the free list (its cache entry was dropped)."""
        lists = self._lists_of(block)
        if block in lists.evictable:
            del lists.evictable[block]
            lists.free.append(block)

    def ref_count(self, block: int) -> int:
        return self._ref_counts[block]

    def check_invariants(self) -> None:
        """Raises if a block is in two states at once, on the lists of the other kind, out of LRU order, or
        has a negative count (tests and debugging)."""
        seen: set[int] = set()
        for kind, lists in (("sink-capable", self._sink), ("plain", self._plain)):
            for state, blocks in (("free", list(lists.free)), ("evictable", list(lists.evictable))):
                misplaced = [b for b in blocks if self.has_sink_row(b) != (lists is self._sink)]
                if misplaced:
                    raise AssertionError(f"blocks {misplaced} on the {kind} {state} list")
                twice = seen.intersection(blocks)
                if twice or len(set(blocks)) != len(blocks):
                    raise AssertionError(f"blocks listed twice as free or evictable: {sorted(twice) or blocks}")
                seen.update(blocks)
            stamps = list(lists.evictable.values())
            if stamps != sorted(stamps):
                raise AssertionError(f"the {kind} evictable list is out of release order: {stamps}")
        for block, count in enumerate(self._ref_counts):
            if count < 0:
                raise AssertionError(f"block {block} has ref count {count}")
            if count > 0 and block in seen:
                raise AssertionError(f"block {block} is referenced ({count}) and free")
            if count == 0 and block not in seen:
                raise AssertionError(f"block {block} is unreferenced and lost")


class BlockManager:
    """Grows and frees the block tables of sequences on top of a `BlockPool`."""

    def __init__(self, num_blocks: int, block_size: int, num_sink_blocks: int | None = None) -> None:
        self.pool = BlockPool(num_blocks, num_sink_blocks)
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

    def can_grow(self, block_table: list[int], num_tokens: int) -> bool:
        """Whether `grow(block_table, num_tokens)` would succeed now."""
        missing = self.blocks_for(num_tokens) - len(block_table)
        if missing <= 0:
            return True
        return missing <= self.pool.num_free_blocks and (bool(block_table) or self.pool.can_start_sequence())

    def grow(self, block_table: list[int], num_tokens: int) -> bool:
        """Extends `block_table` in place to hold `num_tokens`; False (and no change) if blocks run out. An empty
        table's first block is sink-capable."""
        if not self.can_grow(block_table, num_tokens):
            return False
        missing = self.blocks_for(num_tokens) - len(block_table)
        if missing > 0:
            block_table.extend(self.pool.allocate(missing, starts_sequence=not block_table))
        return True

    def free(self, block_table: list[int]) -> None:
        """Releases every block of a table, last block first, and empties it.

        Releasing the tail first puts a cached chain's deepest blocks at the front of the eviction order,
        so a prefix is evicted from its end and its head stays reachable longest.
        """
        self.pool.release(reversed(block_table))
        block_table.clear()
