"""Scheduler invariants under random workloads: token budget, batch size, block accounting, preemption."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from arbi_grpc.engine.block_manager import BlockManager
from arbi_grpc.engine.request import GenerationRequest
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.engine.scheduler import Scheduler
from arbi_grpc.engine.sequence import Sequence, SequenceStatus

BLOCK_SIZE = 4


def _sequence(index: int, prompt_len: int) -> Sequence:
    request = GenerationRequest(
        request_id=f"r{index}",
        prompt_token_ids=tuple(range(1, prompt_len + 1)),
        sampling=SamplingParams(),
        stopping=StoppingParams(max_output_tokens=8),
    )
    # The scheduler never touches the sampling or text pipeline.
    return Sequence(request=request, sink=lambda _: None, sampling_state=None,
                    detokenizer=None, stop_matcher=None)


def _check_invariants(scheduler: Scheduler, sequences: list[Sequence]) -> None:
    manager = scheduler.block_manager
    owned = [b for s in sequences for b in s.block_table]
    assert len(owned) == len(set(owned)), "a block belongs to two sequences"
    assert manager.num_free_blocks + len(owned) == manager.num_total_blocks
    for s in sequences:
        if s.status is SequenceStatus.WAITING:
            assert s in scheduler.waiting
        if s.status is SequenceStatus.RUNNING:
            assert s in scheduler.running
            assert len(s.block_table) * BLOCK_SIZE >= s.num_computed_tokens


@settings(max_examples=60, deadline=None)
@given(
    prompt_lens=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    num_blocks=st.integers(10, 40),
    budget=st.integers(1, 64),
    max_running=st.integers(1, 6),
    actions=st.lists(st.tuples(st.sampled_from(["step", "finish"]), st.integers(0, 11)), max_size=80),
)
def test_random_workload_keeps_invariants(prompt_lens, num_blocks, budget, max_running, actions) -> None:
    scheduler = Scheduler(BlockManager(num_blocks, BLOCK_SIZE), max_running, budget)
    sequences = [_sequence(i, n) for i, n in enumerate(prompt_lens)]
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
    assert scheduler.block_manager.num_free_blocks == num_blocks
    assert scheduler.num_unfinished == 0


def test_chunked_prefill_then_decode() -> None:
    scheduler = Scheduler(BlockManager(32, BLOCK_SIZE), max_running=4, max_step_tokens=8)
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
    scheduler = Scheduler(BlockManager(4, BLOCK_SIZE), max_running=4, max_step_tokens=64)
    first, second = _sequence(0, 8), _sequence(1, 8)
    scheduler.add(first)
    scheduler.add(second)
    step = scheduler.schedule()
    assert len(step.chunks) == 2 and scheduler.block_manager.num_free_blocks == 0
    for chunk in step.chunks:
        chunk.sequence.num_computed_tokens += chunk.num_tokens
        chunk.sequence.token_ids.append(7)
    step = scheduler.schedule()  # `first` needs a third block: `second` is preempted
    assert step.preempted == [second]
    assert second.status is SequenceStatus.WAITING and second.num_computed_tokens == 0
    assert second.block_table == [] and list(scheduler.waiting) == [second]
    assert [(c.sequence, c.num_tokens) for c in step.chunks] == [(first, 1)]
