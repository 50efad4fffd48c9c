"""Batch slots: the pool's precise refusals; the scheduler's slots over random schedules with preemption, prefix
hits, overlapped steps and finishes (unique among running sequences, stable while one runs, released on preemption,
finish or once a sequence's last token is in flight, never the reason an admission waits below `max_running`, all
free at the end); and the model runner passing each chunk's slot to attention and to the decode graphs' batch."""

from __future__ import annotations

import random

import pytest
import torch

from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.config import SchedulingLimits
from arbi_grpc.engine.batch_slots import BatchSlots
from arbi_grpc.engine.block_manager import BlockManager
from arbi_grpc.engine.model_runner import ModelRunner
from arbi_grpc.engine.prefix_cache import PrefixCache
from arbi_grpc.engine.request import GenerationRequest, Priority, SchedulingParams
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.engine.scheduler import ScheduledChunk, ScheduledStep, Scheduler
from arbi_grpc.engine.sequence import Sequence, SequenceStatus
from arbi_grpc.models.random_weights import random_causal_lm
from tests.unit.engine.tiny_llama import tiny_llama_config

BLOCK_SIZE = 4


def test_slots_are_taken_lowest_first_and_refusals_name_the_slot() -> None:
    slots = BatchSlots(3)
    assert [slots.acquire() for _ in range(3)] == [0, 1, 2]
    with pytest.raises(RuntimeError, match="every one of the 3 batch slots is taken"):
        slots.acquire()
    slots.release(1)
    with pytest.raises(RuntimeError, match="batch slot 1 released but it is free"):
        slots.release(1)
    with pytest.raises(RuntimeError, match="batch slot 3 is not one of the pool's slots 0..2"):
        slots.release(3)
    assert (slots.num_free, slots.num_taken) == (1, 2)
    assert slots.acquire() == 1
    with pytest.raises(ValueError, match="at least one slot"):
        BatchSlots(0)


def _scheduler(num_blocks: int, max_running: int, budget: int, prefix_cache: bool = False,
               num_first_blocks: int | None = None) -> Scheduler:
    return Scheduler(BlockManager(num_blocks, BLOCK_SIZE, num_first_blocks=num_first_blocks,
                     prefix_cache=PrefixCache(BLOCK_SIZE) if prefix_cache else None),
                     SchedulingLimits(max_running_requests=max_running, max_step_tokens=budget,
                                      max_prefill_chunk_tokens=max(1, budget // 2)))


def _sequence(index: int, prompt: list[int], max_output_tokens: int,
              priority: Priority = Priority.INTERACTIVE) -> Sequence:
    request = GenerationRequest(
        request_id=f"r{index}", prompt_token_ids=tuple(prompt), sampling=SamplingParams(),
        stopping=StoppingParams(max_output_tokens=max_output_tokens), scheduling=SchedulingParams(priority=priority),
    )
    return Sequence(request=request, sink=lambda _: None, sampling_state=None, detokenizer=None, stop_matcher=None)


class _OverlappedLoop:
    """Applies scheduled steps as the overlapped engine loop does, without a model: a step's tokens count as
    computed at launch, a completing chunk samples a token that stays in flight until the next step is launched,
    and reading it finishes the sequence at `max_output_tokens`; blocks are indexed in the prefix cache as
    StepPipeline indexes them."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self._in_flight: list[Sequence] = []  # sequences whose token the launched step sampled

    def step(self) -> list[Sequence]:
        """Schedules and launches a step, then reads the previous one; returns the preempted sequences."""
        step = self.scheduler.schedule()
        sampled = [chunk.sequence for chunk in step.chunks if chunk.completes_sequence]
        for chunk in step.chunks:
            chunk.sequence.num_computed_tokens += chunk.num_tokens
            self._index_known_blocks(chunk.sequence)
        for sequence in sampled:
            sequence.num_in_flight_tokens += 1
        previous, self._in_flight = self._in_flight, sampled
        self._read(previous)
        return step.preempted

    def read_in_flight(self) -> None:
        previous, self._in_flight = self._in_flight, []
        self._read(previous)

    def _read(self, sampled: list[Sequence]) -> None:
        for sequence in sampled:
            if sequence.status is SequenceStatus.FINISHED:
                continue  # its row is discarded
            sequence.num_in_flight_tokens -= 1
            sequence.token_ids.append(7)
            self._index_known_blocks(sequence)
            if sequence.num_output_tokens >= sequence.request.stopping.max_output_tokens:
                self.scheduler.finish(sequence)


    def _index_known_blocks(self, sequence: Sequence) -> None:
        self.scheduler.block_manager.index_full_blocks(sequence, min(sequence.num_computed_tokens, len(sequence.token_ids)))


def _check_slots(scheduler: Scheduler, sequences: list[Sequence]) -> None:
    holders = [s for s in sequences if s.batch_slot is not None]
    slots = [s.batch_slot for s in holders]
    assert len(set(slots)) == len(slots), f"two running sequences share a batch slot: {sorted(slots)}"
    assert all(0 <= slot < scheduler.batch_slots.num_slots for slot in slots)
    assert scheduler.batch_slots.num_taken == len(holders)
    assert all(s.status is SequenceStatus.RUNNING for s in holders), "a waiting or finished sequence holds a slot"
    for s in scheduler.running:
        assert s.batch_slot is not None or s.reached_max_output_tokens, "a running sequence lost its slot"


@pytest.mark.parametrize("seed", range(40))
def test_running_sequences_hold_unique_stable_slots_over_a_random_overlapped_schedule(seed: int) -> None:
    rng = random.Random(seed)
    max_running = rng.randint(1, 6)
    scheduler = _scheduler(num_blocks=rng.randint(10, 48), max_running=max_running, budget=rng.randint(2, 48),
                           prefix_cache=rng.random() < 0.7,
                           num_first_blocks=rng.choice([None, rng.randint(max_running + 1, 10)]))
    loop = _OverlappedLoop(scheduler)
    shared_prefix = list(range(1, rng.randint(0, 16) + 1))  # prompts start alike, so the prefix cache gets hits
    sequences: list[Sequence] = []
    for _ in range(300):
        action = rng.choices(["arrive", "step", "finish", "read"], weights=[2, 8, 1, 1])[0]
        held_before = {s: s.batch_slot for s in sequences if s.batch_slot is not None}
        preempted: list[Sequence] = []
        if action == "arrive":
            prompt = (shared_prefix + [100 + len(sequences)] * 30)[: rng.randint(1, 30)]
            priority = rng.choice([Priority.BATCH, Priority.INTERACTIVE])
            sequences.append(_sequence(len(sequences), prompt, rng.randint(1, 8), priority))
            scheduler.add(sequences[-1])
        elif action == "finish" and sequences:
            target = rng.choice(sequences)
            if target.status is not SequenceStatus.FINISHED:
                scheduler.finish(target)
        elif action == "read":
            loop.read_in_flight()
        elif action == "step":
            preempted = loop.step()
            if scheduler.waiting and scheduler._num_batch_slots_taken() < max_running:
                assert scheduler.batch_slots.num_free > 0, "an admission waited for a batch slot below max_running"
        _check_slots(scheduler, sequences)
        for sequence, slot in held_before.items():
            if sequence.batch_slot is not None and sequence not in preempted:
                assert sequence.batch_slot == slot, "a running sequence changed batch slot"
    loop.read_in_flight()
    for sequence in sequences:
        if sequence.status is not SequenceStatus.FINISHED:
            scheduler.finish(sequence)
    assert all(s.batch_slot is None for s in sequences)
    assert scheduler.batch_slots.num_free == max_running


def test_a_sequence_whose_last_token_is_in_flight_gives_its_slot_to_an_admission() -> None:
    scheduler = _scheduler(32, max_running=1, budget=64)
    loop = _OverlappedLoop(scheduler)
    ending, waiting = _sequence(0, [1, 2, 3], max_output_tokens=2), _sequence(1, [4, 5], max_output_tokens=2)
    scheduler.add(ending)
    scheduler.add(waiting)
    loop.step()  # prefill: `ending` samples its first token
    assert (ending.batch_slot, waiting.status) == (0, SequenceStatus.WAITING)
    loop.step()  # decode: `ending` samples its last token
    assert ending.reached_max_output_tokens and ending.status is SequenceStatus.RUNNING
    step = scheduler.schedule()  # `ending` is not scheduled again: its batch slot goes to `waiting`
    assert [chunk.sequence for chunk in step.chunks] == [waiting]
    assert ending.batch_slot is None and waiting.batch_slot == 0
    scheduler.finish(ending)  # its token read: nothing more to release
    assert scheduler.batch_slots.num_taken == 1


def test_preemption_and_finish_release_the_slot_and_readmission_takes_one_again() -> None:
    scheduler = _scheduler(6, max_running=4, budget=64)
    first, second = _sequence(0, list(range(1, 9)), 32), _sequence(1, list(range(11, 19)), 32)
    scheduler.add(first)
    scheduler.add(second)
    loop = _OverlappedLoop(scheduler)
    while not scheduler.num_preemptions:
        preempted = loop.step()
    assert preempted == [second] and second.batch_slot is None and first.batch_slot == 0
    scheduler.finish(first)
    assert first.batch_slot is None and scheduler.batch_slots.num_free == 4
    loop.step()
    assert second.status is SequenceStatus.RUNNING and second.batch_slot == 0


def test_a_max_running_raised_after_construction_is_capped_by_the_batch_slots() -> None:
    scheduler = _scheduler(64, max_running=2, budget=64)
    scheduler.limits = SchedulingLimits(max_running_requests=4, max_step_tokens=64,  # an admin update
                                        max_prefill_chunk_tokens=32)
    sequences = [_sequence(i, [10 * i + 1, 10 * i + 2], 8) for i in range(4)]
    for sequence in sequences:
        scheduler.add(sequence)
    step = scheduler.schedule()
    assert [chunk.sequence for chunk in step.chunks] == sequences[:2]
    assert [s.batch_slot for s in sequences] == [0, 1, None, None]


def test_the_runner_passes_each_chunk_s_batch_slot_not_its_row() -> None:
    config = tiny_llama_config()
    model = random_causal_lm(config, torch.float32, "cpu", seed=1)
    kv_cache = PagedKVCache.for_model(config, num_blocks=8, block_size=BLOCK_SIZE, dtype=torch.float32, device="cpu")
    runner = ModelRunner(model, kv_cache, BLOCK_SIZE, torch.device("cpu"))
    seen = []
    model.register_forward_pre_hook(lambda module, args: seen.append(args[2]))  # (ids, positions, metadata, cache)
    first, second = _sequence(0, list(range(1, 9)), 4), _sequence(1, list(range(11, 19)), 4)
    first.block_table, first.batch_slot = [0, 1], 5
    second.block_table, second.batch_slot = [2, 3], 2
    chunks = [ScheduledChunk(first, 0, 3), ScheduledChunk(second, 0, 1)]  # mid-prompt: nothing is sampled
    runner.launch(ScheduledStep(chunks), previous=None)
    assert seen[0].batch_slots.tolist() == [5, 2]
    decodes = [ScheduledChunk(second, 0, 1), ScheduledChunk(first, 0, 1)]
    assert runner._decode_batch(runner._lay_out(decodes), None).batch_slots == [2, 5]
    second.batch_slot = None
    with pytest.raises(RuntimeError, match="request 'r1' was scheduled without a batch slot"):
        runner.launch(ScheduledStep(chunks), previous=None)
