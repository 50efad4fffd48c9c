"""Boot-time warm-up of the eager step shapes: the kernels a served step launches outside the CUDA graphs compile
on their first use (Triton compiles a kernel again for each value of its compile-time flags, e.g. a decode split
count of one or more, a prefill chunk after a cached prefix or not), and a compile in the middle of serving stalls
every running request for seconds. `ModelRunner.warm_up_eager_steps` runs these shapes once at boot on scratch
blocks.

Nothing it writes is read later: its blocks are free (the block manager has handed none out, so none is cached
for a prefix), and the two batch slots' per-sequence state is written by the next sequence that takes them before
it is read (a new sequence starts with nothing cached, a prefix hit seeds it: `seed_reused_blocks`).
"""

from __future__ import annotations

from itertools import accumulate

from arbi_grpc.attention.kv_storage import KVStorage
from arbi_grpc.engine.step_inputs import StepInputs

WARM_UP_CONTEXT = 1024  # tokens of the longer decode row and of the cached prefix: split by the decode kernels at
# any GPU size, and past the exact window of any TKV cache (its window of E blocks is far shorter)
WARM_UP_CHUNK = 16  # tokens of the prefill chunk beside the decode rows
SHORT_DECODE_CONTEXT = 17  # a decode row no kernel splits
MIN_WARM_UP_BLOCKS = 4  # blocks of context below which there is nothing to warm up


def warm_up_steps(kv_cache: KVStorage, max_model_len: int) -> list[StepInputs]:
    """The eager steps to run once: a fresh prompt of `context` tokens in sequence 0 (batch slot 0), then two mixed
    steps, a decode row of sequence 0 (at `context` + 1 tokens, then at SHORT_DECODE_CONTEXT) beside a chunk of
    sequence 1 (slot 1) after a cached prefix of `context` tokens (WARM_UP_CONTEXT, less where the pool or
    max_model_len is smaller). Empty when they leave less than MIN_WARM_UP_BLOCKS blocks of context or the storage
    fewer than two sequences (a test-sized pool: nothing in it is long enough to split)."""
    block_size = kv_cache.block_size
    blocks_each = kv_cache.num_blocks // 2
    context = min(WARM_UP_CONTEXT, max_model_len - WARM_UP_CHUNK, blocks_each * block_size - WARM_UP_CHUNK)
    slots = kv_cache.num_batch_slots  # None: the storage keeps no state per sequence
    if context < MIN_WARM_UP_BLOCKS * block_size or kv_cache.num_first_blocks < 2 or (slots is not None and slots < 2):
        return []
    needed = -(-(context + WARM_UP_CHUNK) // block_size)  # at most blocks_each: both tables fit in the pool
    rest = range(2, kv_cache.num_blocks)  # blocks 0 and 1 start the sequences (both may start one)
    tables = [[0, *rest[: needed - 1]], [1, *rest[needed - 1: 2 * (needed - 1)]]]

    def step(query_lens: list[int], seq_lens: list[int]) -> StepInputs:
        last_rows = [end - 1 for end in accumulate(query_lens)]
        return StepInputs(query_lens, seq_lens, tables[: len(query_lens)], list(range(len(query_lens))), last_rows, [])

    return [
        step([context], [context]),
        step([1, WARM_UP_CHUNK], [context + 1, context + WARM_UP_CHUNK]),
        step([1, WARM_UP_CHUNK], [SHORT_DECODE_CONTEXT, context + WARM_UP_CHUNK]),
    ]
