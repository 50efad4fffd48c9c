"""Sequence-level KV block management: block tables, prefix-cache reuse at admission, and indexing of
blocks as they fill. The scheduler calls this; the block pool and prefix cache stay below it.
"""

from __future__ import annotations

from arbi_grpc.engine.block_manager import BlockManager
from arbi_grpc.engine.prefix_cache import PrefixCache
from arbi_grpc.engine.sequence import Sequence


class KVCacheManager:
    """Owns the block pool and, when enabled, the prefix cache over it. `num_sink_blocks` is the storage's count of
    blocks with a sink row (a TKV cache's), None when every block may start a sequence."""

    def __init__(
        self, num_blocks: int, block_size: int, enable_prefix_cache: bool, num_sink_blocks: int | None = None
    ) -> None:
        self.blocks = BlockManager(num_blocks, block_size, num_sink_blocks)
        self.block_size = block_size
        self.prefix_cache = PrefixCache(self.blocks.pool, block_size) if enable_prefix_cache else None

    @property
    def num_free_blocks(self) -> int:
        return self.blocks.num_free_blocks

    @property
    def num_total_blocks(self) -> int:
        return self.blocks.num_total_blocks

    def blocks_for(self, num_tokens: int) -> int:
        return self.blocks.blocks_for(num_tokens)

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
        sequence.block_table, sequence.block_hashes = self.prefix_cache.match(
            namespace, sequence.token_ids, max_blocks
        )
        if sequence.block_table and not self.blocks.pool.has_sink_row(sequence.block_table[0]):
            raise RuntimeError(
                f"the prefix cache served block {sequence.block_table[0]} as a sequence's first block, but only blocks "
                f"below {self.blocks.pool.num_sink_blocks} have a sink row; a cached chain's head must be a first block"
            )
        sequence.num_computed_tokens = len(sequence.block_table) * self.block_size
        return sequence.num_computed_tokens

    def can_start(self, sequence: Sequence) -> bool:
        """Whether the sequence holds blocks already or its first block (a sink-capable one) can be had now."""
        return bool(sequence.block_table) or self.blocks.pool.can_start_sequence()

    def grow(self, sequence: Sequence, num_tokens: int) -> bool:
        """Makes the block table hold `num_tokens` tokens; False (no change) when blocks run out."""
        return self.blocks.grow(sequence.block_table, num_tokens)

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
        """Releases a sequence's blocks (cached ones become evictable) and resets its cache progress."""
        self.blocks.free(sequence.block_table)
        sequence.block_hashes.clear()
        sequence.num_computed_tokens = 0

    def flush_prefix_cache(self, namespace: str | None = None) -> int:
        """Drops cached prefixes (all, or one tenant's); returns how many blocks were unindexed."""
        return 0 if self.prefix_cache is None else self.prefix_cache.flush(namespace)
