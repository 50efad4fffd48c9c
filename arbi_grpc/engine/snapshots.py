"""What other threads read of the engine: snapshots taken on the engine thread (`EngineStats`, published after
every step and every task; `RequestSnapshot`, taken by an engine call). Nothing else of the scheduler, the block
manager or the runner is read from another thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from arbi_grpc.engine.scheduler import Scheduler
from arbi_grpc.engine.sequence import SequenceStatus


@dataclass(frozen=True)
class RequestSnapshot:
    """Where one request stands, for listings (taken on the engine thread between steps)."""

    request_id: str
    running: bool
    num_prompt_tokens: int
    num_output_tokens: int
    num_blocks: int


@dataclass(frozen=True)
class EngineStats:
    """The engine's counters and KV block accounting as of its last step or task."""

    num_running: int
    num_waiting: int
    num_free_blocks: int
    num_total_blocks: int
    num_preemptions: int
    num_cached_blocks: int
    num_evictions: int
    prefix_cache_hit_tokens: int
    prefix_cache_query_tokens: int


def engine_stats(scheduler: Scheduler) -> EngineStats:
    """The stats of `scheduler` and its block manager now (on the engine thread)."""
    blocks = scheduler.block_manager
    cache = blocks.prefix_cache
    return EngineStats(
        num_running=len(scheduler.running),
        num_waiting=len(scheduler.waiting),
        num_free_blocks=blocks.num_free_blocks,
        num_total_blocks=blocks.num_total_blocks,
        num_preemptions=scheduler.num_preemptions,
        num_cached_blocks=blocks.num_cached_blocks,
        num_evictions=blocks.num_evictions,
        prefix_cache_hit_tokens=0 if cache is None else cache.stats.num_hit_tokens,
        prefix_cache_query_tokens=0 if cache is None else cache.stats.num_query_tokens,
    )


def request_snapshots(scheduler: Scheduler) -> list[RequestSnapshot]:
    """The requests `scheduler` holds, running ones first, then waiting ones in admission order (on the engine
    thread)."""
    return [
        RequestSnapshot(s.request_id, s.status is SequenceStatus.RUNNING, s.num_prompt_tokens, s.num_output_tokens,
                        len(s.block_table))
        for s in (*scheduler.running, *scheduler.waiting)
    ]
