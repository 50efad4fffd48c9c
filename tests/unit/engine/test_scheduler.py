"""Scheduler invariants under random workloads: token budget, batch size, block accounting, preemption, and
sequences that start only on first-capable blocks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from arbi_grpc.config import SchedulingLimits
from arbi_grpc.engine.block_manager import BlockManager
from arbi_grpc.engine.prefix_cache import PrefixCache
from arbi_grpc.engine.request import GenerationRequest, Priority, SchedulingParams
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.engine.scheduler import Scheduler
from arbi_grpc.engine.sequence import Sequence, SequenceStatus

BLOCK_SIZE = 4


def _scheduler(num_blocks: int, max_running: int, budget: int, chunk: int | None = None,
               prefix_cache: bool = False, num_first_blocks: int | None = None) -> Scheduler:
    return Scheduler(
        BlockManager(num_blocks, BLOCK_SIZE, num_first_blocks=num_first_blocks,
                     prefix_cache=PrefixCache(BLOCK_SIZE) if prefix_cache else None),
        SchedulingLimits(max_running_requests=max_running, max_step_tokens=budget,
                         max_prefill_chunk_tokens=chunk or budget),
    )


def _sequence(index: int, prompt_len: int, priority: Priority = Priority.INTERACTIVE,
              first_token: int = 1) -> Sequence:
    request = GenerationRequest(
        request_id=f"r{index}",
        prompt_token_ids=tuple(range(first_token, first_token + prompt_len)),
        sampling=SamplingParams(),
        stopping=StoppingParams(max_output_tokens=32),
        scheduling=SchedulingParams(priority=priority),
    )
    # The scheduler never touches the sampling or text pipeline.
    return Sequence(request=request, sink=lambda _: None, sampling_state=None,
                    detokenizer=None, stop_matcher=None)


def _check_invariants(scheduler: Scheduler, sequences: list[Sequence]) -> None:
    kv = scheduler.block_manager
    owned = [b for s in sequences for b in s.block_table]
    kv.check_invariants()
    if kv.prefix_cache is None:
        assert len(owned) == len(set(owned)), "a block belongs to two sequences"
        assert kv.num_free_blocks + len(owned) == kv.num_total_blocks
    for block in set(owned):
        assert kv.ref_count(block) == owned.count(block)
    for s in sequences:
        if s.status is SequenceStatus.WAITING:
            assert s in scheduler.waiting
        if s.status is SequenceStatus.RUNNING:
            assert s in scheduler.running
            assert len(s.block_table) * BLOCK_SIZE >= s.num_computed_tokens
            assert kv.may_start_sequence(s.block_table[0]), "a sequence started on a block that may not start one"


@settings(max_examples=60, deadline=None)
@given(
    prompt_lens=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    num_blocks=st.integers(10, 40),
    budget=st.integers(1, 64),
    max_running=st.integers(1, 6),
    actions=st.lists(st.tuples(st.sampled_from(["step", "finish"]), st.integers(0, 11)), max_size=80),
    prefix_cache=st.booleans(),
    shared_prefix=st.integers(0, 12),
    batch_mask=st.integers(0, 2**12 - 1),
    num_first_blocks=st.one_of(st.none(), st.integers(1, 8)),
)
def test_random_workload_keeps_invariants(prompt_lens, num_blocks, budget, max_running, actions,
                                          prefix_cache, shared_prefix, batch_mask, num_first_blocks) -> None:
    scheduler = _scheduler(num_blocks, max_running, budget, max(1, budget // 2), prefix_cache, num_first_blocks)
    sequences = []
    for i, n in enumerate(prompt_lens):
        priority = Priority.BATCH if batch_mask >> i & 1 else Priority.INTERACTIVE
        # Prompts share their first `shared_prefix` tokens, so the prefix cache gets hits.
        sequence = _sequence(i, n, priority)
        tokens = list(range(1, shared_prefix + 1)) + [100 + i] * n
        sequence.token_ids[:] = tokens[:n]
        sequences.append(sequence)
    for s in sequences:
        scheduler.add(s)
    for action, index in actions:
        if action == "finish":
            target = sequences[index % len(sequences)]
            if target.status is not SequenceStatus.FINISHED:
                scheduler.finish(target)
        else:
            step = scheduler.schedule()
            assert step.num_tokens <= budget
            assert len(scheduler.running) <= max_running
            assert len({id(c.sequence) for c in step.chunks}) == len(step.chunks)
            for chunk in step.chunks:
                assert chunk.num_tokens >= 1
                assert chunk.sequence.status is SequenceStatus.RUNNING
                chunk.sequence.num_computed_tokens += chunk.num_tokens
                if chunk.completes_sequence:
                    chunk.sequence.token_ids.append(7)  # a sampled token
        _check_invariants(scheduler, sequences)
    for s in sequences:
        if s.status is not SequenceStatus.FINISHED:
            scheduler.finish(s)
    scheduler.block_manager.check_invariants()
    assert scheduler.num_unfinished == 0
    assert scheduler.block_manager.num_free_blocks == num_blocks  # cached blocks are evictable, hence available
    scheduler.block_manager.flush_prefix_cache()
    assert scheduler.block_manager.num_evictable_blocks == 0


def test_chunked_prefill_then_decode() -> None:
    scheduler = _scheduler(32, max_running=4, budget=8)
    long, short = _sequence(0, 20), _sequence(1, 3)
    scheduler.add(long)
    scheduler.add(short)
    step = scheduler.schedule()
    assert [(c.sequence, c.num_tokens) for c in step.chunks] == [(long, 8)]
    long.num_computed_tokens += 8
    step = scheduler.schedule()
    assert [(c.sequence, c.num_tokens) for c in step.chunks] == [(long, 8)]
    long.num_computed_tokens += 8
    step = scheduler.schedule()  # the long prompt's last 4 tokens leave room for the short one
    assert [(c.sequence, c.num_tokens) for c in step.chunks] == [(long, 4), (short, 3)]
    assert all(c.completes_sequence for c in step.chunks)


def test_preemption_frees_the_newest_and_recomputes_it() -> None:
    scheduler = _scheduler(6, max_running=4, budget=64)
    first, second = _sequence(0, 8), _sequence(1, 8)
    scheduler.add(first)
    scheduler.add(second)
    step = scheduler.schedule()
    assert len(step.chunks) == 2 and scheduler.block_manager.num_free_blocks == 2
    for chunk in step.chunks:
        chunk.sequence.num_computed_tokens += chunk.num_tokens
        chunk.sequence.token_ids.extend([7] * 4)  # as if four decode steps ran
        chunk.sequence.num_computed_tokens += 3
    step = scheduler.schedule()  # both need a third block, two are free: fine
    for chunk in step.chunks:
        chunk.sequence.num_computed_tokens += chunk.num_tokens
        chunk.sequence.token_ids.extend([7] * 4)
        chunk.sequence.num_computed_tokens += 3
    step = scheduler.schedule()  # `first` needs a fourth block, none free: `second` is preempted
    assert step.preempted == [second]
    assert second.status is SequenceStatus.WAITING and second.num_computed_tokens == 0
    assert second.block_table == [] and list(scheduler.waiting) == [second]
    assert [(c.sequence, c.num_tokens) for c in step.chunks] == [(first, 1)]


def _run(step) -> None:
    """Applies a step as the engine would: tokens computed, a token sampled where a chunk completes."""
    for chunk in step.chunks:
        chunk.sequence.num_computed_tokens += chunk.num_tokens
        if chunk.completes_sequence:
            chunk.sequence.token_ids.append(7)


def test_interactive_is_admitted_before_earlier_batch() -> None:
    scheduler = _scheduler(32, max_running=1, budget=64)
    batch = _sequence(0, 5, Priority.BATCH)
    interactive = _sequence(1, 5, Priority.INTERACTIVE)
    scheduler.add(batch)
    scheduler.add(interactive)
    step = scheduler.schedule()
    assert [c.sequence for c in step.chunks] == [interactive]


def test_interactive_preempts_batch_when_blocks_run_out() -> None:
    scheduler = _scheduler(4, max_running=4, budget=64)
    batch = _sequence(0, 12, Priority.BATCH)  # 3 of the 4 blocks
    scheduler.add(batch)
    _run(scheduler.schedule())
    interactive = _sequence(1, 8, Priority.INTERACTIVE, first_token=50)  # needs 2 blocks
    scheduler.add(interactive)
    step = scheduler.schedule()
    assert step.preempted == [batch]
    assert [c.sequence for c in step.chunks] == [interactive]
    assert batch.status is SequenceStatus.WAITING and batch.block_table == []


def test_long_prompt_cannot_starve_short_ones() -> None:
    scheduler = _scheduler(256, max_running=8, budget=32, chunk=16)
    long = _sequence(0, 400)
    scheduler.add(long)
    _run(scheduler.schedule())  # alone: the long prompt takes the whole budget
    assert long.num_computed_tokens == 32
    shorts = [_sequence(i, 6, first_token=1000 * i) for i in range(1, 4)]
    for short in shorts:
        scheduler.add(short)
    step = scheduler.schedule()
    chunks = {c.sequence.request_id: c.num_tokens for c in step.chunks}
    assert chunks["r0"] == 16  # capped while others wait
    assert chunks["r1"] == 6 and chunks["r2"] == 6 and chunks["r3"] == 4  # the rest of the budget
    _run(step)
    step = scheduler.schedule()  # decodes first; two prefills still compete, so both are capped
    assert [(c.sequence.request_id, c.num_tokens) for c in step.chunks] == [
        ("r1", 1), ("r2", 1), ("r0", 16), ("r3", 2)]
    _run(step)
    step = scheduler.schedule()  # the long prompt is the only prefill left: no cap
    assert [(c.sequence.request_id, c.num_tokens) for c in step.chunks] == [
        ("r1", 1), ("r2", 1), ("r3", 1), ("r0", 29)]


def test_sequences_wait_for_a_first_capable_block_and_all_complete() -> None:
    # 40 blocks, but only 2 may start a sequence: at most two sequences run although blocks and slots remain.
    scheduler = _scheduler(40, max_running=6, budget=64, prefix_cache=True, num_first_blocks=2)
    sequences = [_sequence(i, 6, first_token=100 * i) for i in range(5)]
    for sequence in sequences:
        scheduler.add(sequence)
    most_running = 0
    for _ in range(100):
        if not scheduler.num_unfinished:
            break
        step = scheduler.schedule()
        most_running = max(most_running, len(scheduler.running))
        if scheduler.waiting:
            assert len(scheduler.running) == 2 and scheduler.block_manager.num_free_blocks > 10
        _run(step)
        for sequence in list(scheduler.running):
            if sequence.num_output_tokens == 3:
                scheduler.finish(sequence)
        _check_invariants(scheduler, sequences)
    assert scheduler.num_unfinished == 0 and most_running == 2
    assert all(s.status is SequenceStatus.FINISHED for s in sequences)
    assert scheduler.block_manager.num_free_blocks == 40


def test_an_interactive_start_preempts_a_batch_sequence_for_its_first_capable_block() -> None:
    scheduler = _scheduler(16, max_running=4, budget=64, num_first_blocks=1)
    batch = _sequence(0, 5, Priority.BATCH)
    scheduler.add(batch)
    _run(scheduler.schedule())
    interactive = _sequence(1, 5, Priority.INTERACTIVE, first_token=50)
    scheduler.add(interactive)
    step = scheduler.schedule()  # 14 blocks free, none may start a sequence
    assert step.preempted == [batch] and [c.sequence for c in step.chunks] == [interactive]
    assert interactive.block_table[0] == 0
