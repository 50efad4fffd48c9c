"""The KV block manager: the one owner of block ids. It hands blocks to sequences' block tables, counts their
references, reuses cached prefixes at admission and indexes blocks as they fill, and evicts cached blocks only
when an allocation finds none free.

Blocks are only ids here; the tensors live in the KV storage. A block is in exactly one of three states:
referenced (ref count > 0), evictable (ref count 0 but still holding a prefix-cache entry, kept in LRU order), or
free. Allocation takes free blocks first and evicts the least recently released evictable block only when none is
free, so cached prefixes live until memory is actually needed.

Only the first `num_first_blocks` block ids may be a sequence's first block (a storage may keep state per first
block, `KVStorage.num_first_blocks`). The free and evictable lists are kept apart for those and the other blocks;
ordinary growth takes other blocks first, and each evictable entry carries its release stamp so that eviction
still takes the globally oldest block.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from arbi_grpc.engine.prefix_cache import PrefixCache
from arbi_grpc.engine.sequence import Sequence


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


class BlockManager:
    """`num_blocks` KV blocks of `block_size` tokens, of which the first `num_first_blocks` (all of them when None)
    may start a sequence; with a `prefix_cache`, full blocks are indexed and reused across requests."""

    def __init__(self, num_blocks: int, block_size: int, *, num_first_blocks: int | None = None,
                 prefix_cache: PrefixCache | None = None) -> None:
        if num_blocks <= 0:
            raise ValueError(f"a KV block manager needs at least one block, got {num_blocks}")
        num_first_blocks = num_blocks if num_first_blocks is None else num_first_blocks
        if not 0 < num_first_blocks <= num_blocks:
            raise ValueError(f"num_first_blocks must be in [1, {num_blocks}] (the blocks), got {num_first_blocks}")
        if prefix_cache is not None and prefix_cache.block_size != block_size:
            raise ValueError(f"a prefix cache of {prefix_cache.block_size}-token blocks over {block_size}-token blocks")
        self.num_total_blocks = num_blocks
        self.num_first_blocks = num_first_blocks
        self.block_size = block_size
        self.prefix_cache = prefix_cache
        self._first = _BlockLists(deque(range(num_first_blocks)))
        self._rest = _BlockLists(deque(range(num_first_blocks, num_blocks)))
        self._num_releases = 0  # stamps evictable entries, so the two LRU lists compare by age
        self._ref_counts = [0] * num_blocks
        self.num_evictions = 0

    # -- counts ------------------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation can take now: free plus evictable."""
        return len(self._first) + len(self._rest)

    @property
    def num_evictable_blocks(self) -> int:
        return len(self._first.evictable) + len(self._rest.evictable)

    @property
    def num_cached_blocks(self) -> int:
        return 0 if self.prefix_cache is None else self.prefix_cache.num_cached_blocks

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def may_start_sequence(self, block: int) -> bool:
        """Whether `block` may be a sequence's first block."""
        return block < self.num_first_blocks

    def can_start_sequence(self) -> bool:
        """Whether a sequence's first block can be had now (a first-capable block free or evictable)."""
        return len(self._first) > 0

    def ref_count(self, block: int) -> int:
        return self._ref_counts[block]

    # -- sequences ---------------------------------------------------------------------------------

    def reuse_prefix(self, sequence: Sequence) -> int:
        """Attaches the cached blocks of a sequence's longest cached prefix; returns the tokens reused.

        At least one token is always left to compute (its logits are needed), and blocks are only reused
        whole, so no step ever writes into a shared block.
        """
        namespace = sequence.cache_namespace
        if self.prefix_cache is None or namespace is None or sequence.num_computed_tokens:
            return 0
        # Only blocks of tokens the host holds (a token in flight is not among them) and never the last token.
        max_blocks = min(sequence.num_tokens - 1, len(sequence.token_ids)) // self.block_size
        blocks, hashes = self.prefix_cache.match(namespace, sequence.token_ids, max_blocks)
        if blocks and not self.may_start_sequence(blocks[0]):
            raise RuntimeError(
                f"the prefix cache served block {blocks[0]} as a sequence's first block, but only blocks below "
                f"{self.num_first_blocks} may start a sequence; a cached chain's head must be a first block"
            )
        for block in blocks:
            self.retain(block)
        sequence.block_table, sequence.block_hashes = blocks, hashes
        sequence.num_computed_tokens = len(blocks) * self.block_size
        return sequence.num_computed_tokens

    def can_start(self, sequence: Sequence) -> bool:
        """Whether the sequence holds blocks already or its first block can be had now."""
        return bool(sequence.block_table) or self.can_start_sequence()

    def can_grow(self, block_table: list[int], num_tokens: int) -> bool:
        """Whether `grow(block_table, num_tokens)` would succeed now."""
        missing = self.blocks_for(num_tokens) - len(block_table)
        if missing <= 0:
            return True
        return missing <= self.num_free_blocks and (bool(block_table) or self.can_start_sequence())

    def grow(self, block_table: list[int], num_tokens: int) -> bool:
        """Extends `block_table` in place to hold `num_tokens`; False (and no change) if blocks run out. An empty
        table's first block is one that may start a sequence."""
        if not self.can_grow(block_table, num_tokens):
            return False
        missing = self.blocks_for(num_tokens) - len(block_table)
        if missing > 0:
            block_table.extend(self.allocate(missing, starts_sequence=not block_table))
        return True

    def index_full_blocks(self, sequence: Sequence, num_tokens: int) -> None:
        """Registers the blocks full within the first `num_tokens` tokens (the KV a step has written and whose
        token ids the host holds), so later requests can reuse them."""
        num_full = num_tokens // self.block_size
        if num_full <= len(sequence.block_hashes):  # most steps fill no block
            return
        namespace = sequence.cache_namespace
        if self.prefix_cache is None or namespace is None:
            return
        for index in range(len(sequence.block_hashes), num_full):
            hashes = sequence.block_hashes
            parent = hashes[-1] if hashes else self.prefix_cache.root_hash(namespace)
            tokens = tuple(sequence.token_ids[index * self.block_size: (index + 1) * self.block_size])
            block = sequence.block_table[index]
            sequence.block_hashes.append(self.prefix_cache.register(namespace, parent, tokens, block))

    def free(self, sequence: Sequence) -> None:
        """Releases a sequence's blocks, last block first, and resets its cache progress.

        Releasing the tail first puts a cached chain's deepest blocks at the front of the eviction order, so a
        prefix is evicted from its end and its head stays reachable longest.
        """
        self.release(reversed(sequence.block_table))
        sequence.block_table.clear()
        sequence.block_hashes.clear()
        sequence.num_computed_tokens = 0

    def flush_prefix_cache(self, namespace: str | None = None) -> int:
        """Drops cached prefixes (all, or one tenant's); unreferenced blocks return to the free lists. Returns how
        many blocks were unindexed."""
        if self.prefix_cache is None:
            return 0
        dropped = self.prefix_cache.flush(namespace)
        for block in dropped:
            lists = self._lists_of(block)
            if block in lists.evictable:
                del lists.evictable[block]
                lists.free.append(block)
        return len(dropped)

    # -- blocks ------------------------------------------------------------------------------------

    def allocate(self, count: int, starts_sequence: bool = False) -> list[int]:
        """Takes `count` blocks, each with reference count 1, evicting cached ones only if none is free.

        With `starts_sequence` the first block returned may start a sequence. Other blocks are taken from the rest
        when any is free, then from the free first-capable ones, and only then the least recently released
        evictable block.
        """
        if count > self.num_free_blocks:
            raise RuntimeError(f"asked for {count} KV blocks, {self.num_free_blocks} free")
        if starts_sequence and count and not self.can_start_sequence():
            raise RuntimeError(f"no KV block that may start a sequence (ids below {self.num_first_blocks}) is free")
        blocks = [self._take(self._first)] if starts_sequence and count else []
        while len(blocks) < count:
            blocks.append(self._take(self._rest if self._rest.free or not self._first.free else self._first))
        return blocks

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
                if self.prefix_cache is not None and self.prefix_cache.holds(block):
                    lists.evictable[block] = self._num_releases
                    self._num_releases += 1
                else:
                    lists.free.append(block)

    def _take(self, preferred: _BlockLists) -> int:
        """A free block of `preferred`, else its oldest evictable one, or for other blocks the globally oldest."""
        if preferred.free:
            block = preferred.free.popleft()
        else:
            lists = preferred
            if preferred is self._rest and self._older(self._first, self._rest):
                lists = self._first
            block, _ = lists.evictable.popitem(last=False)
            self.num_evictions += 1
            if self.prefix_cache is not None:
                self.prefix_cache.forget(block)
        self._ref_counts[block] = 1
        return block

    @staticmethod
    def _older(first: _BlockLists, second: _BlockLists) -> bool:
        """Whether `first` holds the older evictable block of the two (False when it holds none)."""
        first_stamp, second_stamp = first.oldest_release, second.oldest_release
        return first_stamp is not None and (second_stamp is None or first_stamp < second_stamp)

    def _lists_of(self, block: int) -> _BlockLists:
        return self._first if self.may_start_sequence(block) else self._rest

    def check_invariants(self) -> None:
        """Raises if a block is in two states at once, on the lists of the other kind, out of LRU order, evictable
        without a cache entry, or has a negative count (tests and debugging)."""
        seen: set[int] = set()
        for kind, lists in (("first-capable", self._first), ("other", self._rest)):
            for state, blocks in (("free", list(lists.free)), ("evictable", list(lists.evictable))):
                misplaced = [b for b in blocks if self.may_start_sequence(b) != (lists is self._first)]
                if misplaced:
                    raise AssertionError(f"blocks {misplaced} on the {kind} {state} list")
                twice = seen.intersection(blocks)
                if twice or len(set(blocks)) != len(blocks):
                    raise AssertionError(f"blocks listed twice as free or evictable: {sorted(twice) or blocks}")
                seen.update(blocks)
            uncached = [b for b in lists.evictable if self.prefix_cache is None or not self.prefix_cache.holds(b)]
            if uncached:
                raise AssertionError(f"blocks {uncached} are evictable but hold no prefix-cache entry")
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
