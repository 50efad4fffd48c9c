"""Prefix cache over KV blocks, by chained block hashes.

A full block is identified by the hash of (its parent block's hash, its token ids); the chain starts at a
root hash derived from the namespace (the tenant), so two tenants never share an entry even for equal
tokens. A lookup walks a new sequence's full blocks from the root and stops at the first miss; every hit
is confirmed against the stored token ids and parent hash, so a hash collision can never serve wrong KV.

The cache only indexes blocks; the `BlockManager` owns their lifecycle and holds this cache: it retains the
blocks of a hit, asks `holds` when a block's last reference goes (a registered block becomes evictable, LRU,
instead of free) and calls `forget` when it evicts one because an allocation found no free block. Chosen over a radix tree because block-granular hashes
need no tree surgery on eviction and map one-to-one onto the pool's blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class _Entry:
    namespace: str
    parent_hash: int
    token_ids: tuple[int, ...]
    block_hash: int


@dataclass
class PrefixCacheStats:
    """Running totals for metrics: lookups, prompt tokens looked up and served from the cache."""

    num_queries: int = 0
    num_query_tokens: int = 0
    num_hit_tokens: int = 0
    hits_by_namespace: dict[str, int] = field(default_factory=dict)

    @property
    def hit_rate(self) -> float:
        return self.num_hit_tokens / self.num_query_tokens if self.num_query_tokens else 0.0


class PrefixCache:
    """Maps chained block hashes to KV blocks of `block_size` tokens."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._block_by_hash: dict[int, int] = {}
        self._entries: dict[int, _Entry] = {}  # block -> entry
        self.stats = PrefixCacheStats()

    @property
    def num_cached_blocks(self) -> int:
        return len(self._entries)

    @staticmethod
    def root_hash(namespace: str) -> int:
        return hash(("arbi-prefix-root", namespace))

    @staticmethod
    def chain(parent_hash: int, token_ids: tuple[int, ...]) -> int:
        return hash((parent_hash, token_ids))

    def holds(self, block: int) -> bool:
        """Whether `block` is registered (its last release makes it evictable rather than free)."""
        return block in self._entries

    def match(self, namespace: str, token_ids: list[int], max_blocks: int) -> tuple[list[int], list[int]]:
        """The cached blocks of the longest cached prefix (at most `max_blocks`) and their chained hashes; the
        caller retains the blocks."""
        self.stats.num_queries += 1
        self.stats.num_query_tokens += len(token_ids)
        blocks: list[int] = []
        hashes: list[int] = []
        parent = self.root_hash(namespace)
        for index in range(max_blocks):
            tokens = tuple(token_ids[index * self.block_size: (index + 1) * self.block_size])
            block_hash = self.chain(parent, tokens)
            block = self._block_by_hash.get(block_hash)
            if block is None:
                break
            entry = self._entries[block]
            if entry.token_ids != tokens or entry.parent_hash != parent or entry.namespace != namespace:
                break  # a hash collision: never serve it
            blocks.append(block)
            hashes.append(block_hash)
            parent = block_hash
        hit_tokens = len(blocks) * self.block_size
        self.stats.num_hit_tokens += hit_tokens
        if hit_tokens:
            self.stats.hits_by_namespace[namespace] = self.stats.hits_by_namespace.get(namespace, 0) + hit_tokens
        return blocks, hashes

    def register(self, namespace: str, parent_hash: int, token_ids: tuple[int, ...], block: int) -> int:
        """Indexes a just-filled block; returns its hash. An existing entry for the same hash wins."""
        block_hash = self.chain(parent_hash, token_ids)
        if block_hash not in self._block_by_hash and block not in self._entries:
            self._block_by_hash[block_hash] = block
            self._entries[block] = _Entry(namespace, parent_hash, token_ids, block_hash)
        return block_hash

    def flush(self, namespace: str | None = None) -> list[int]:
        """Drops every entry (or one namespace's); returns the blocks unindexed."""
        dropped = [b for b, e in self._entries.items() if namespace is None or e.namespace == namespace]
        for block in dropped:
            self.forget(block)
        return dropped

    def forget(self, block: int) -> None:
        """Drops `block`'s entry (it was evicted)."""
        entry = self._entries.pop(block)
        del self._block_by_hash[entry.block_hash]
