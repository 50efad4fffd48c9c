"""Decides, each step, which sequences run and how many of their tokens: continuous batching with
chunked prefill under a per-step token budget, priorities, prefix reuse, and preemption by recompute.

Each step:
1. Running sequences are served first: interactive before batch, decodes before prefill chunks, oldest
   first. A decode takes one token, an unfinished prefill a chunk. When a running sequence cannot grow, the
   newest batch sequence (else the newest interactive one) is preempted: its blocks are freed and it waits to
   be recomputed.
2. Waiting sequences are admitted, interactive first, while budget, batch slots and blocks last. A new
   sequence first reuses its longest cached prefix; it is admitted only if the blocks for its whole known
   length fit (plus a small reserve for running decodes when others run), so a long prompt is not admitted
   just to be preempted, and only if its first block can be had (the KV storage may let only some blocks
   start a sequence, `BlockManager.can_start`). An interactive sequence that does not fit may preempt running
   batch sequences.
3. While another prefill runs or waits, a prefill chunk is capped at `max_prefill_chunk_tokens`, so a
   long prompt cannot starve short ones.
Lengths count tokens still in flight on the device (`Sequence.num_tokens`): with overlapped steps the next
step is planned before the host has read the previous one's tokens. A sequence whose in-flight token is its
last allowed output is not scheduled again.

Batch slots: every running sequence holds one (`Sequence.batch_slot`), acquired at admission and kept while it
runs; two running sequences never share one, so a KV storage may keep state per slot. A slot goes back when its
sequence is preempted or finished, or as soon as a step is planned while the sequence's last allowed token is in
flight: such a sequence is never scheduled again (it ends when that token is read), so its slot is free for an
admission in this very step. With as many slots as `max_running_requests` an admission is never refused for lack of one.
Reusing a slot whose last writer is still in flight is safe: the later step writes it after, in the device's
queue. The slots are sized from `max_running_requests` at construction; the admin API refuses to raise the limit above
them later (`ModelHost`). A sequence (re)admitted with a prefix hit says so on its first chunk
(`num_reused_blocks`), so that the storage can bring its per-slot state up to date (`ModelRunner`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from arbi_grpc.config import SchedulingLimits
from arbi_grpc.engine.block_manager import BlockManager
from arbi_grpc.engine.request import Priority
from arbi_grpc.engine.sequence import Sequence, SequenceStatus
from arbi_grpc.engine.batch_slots import BatchSlots
from arbi_grpc.engine.waiting_queue import WaitingQueue


@dataclass(frozen=True)
class ScheduledChunk:
    """`num_tokens` tokens of `sequence` from position `start` (its computed tokens when scheduled).

    `num_reused_blocks`: on the first chunk of a sequence (re)admitted in this step, the blocks of its prefix-cache
    hit (0 otherwise), which the KV storage may need for its per-slot state (`KVStorage.seed_reused_blocks`)."""

    sequence: Sequence
    start: int
    num_tokens: int
    num_reused_blocks: int = 0

    @property
    def end(self) -> int:
        return self.start + self.num_tokens

    @property
    def completes_sequence(self) -> bool:
        """True when this chunk reaches the last known token, so the step samples a new one."""
        return self.end == self.sequence.num_tokens


@dataclass
class ScheduledStep:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(chunk.num_tokens for chunk in self.chunks)


class Scheduler:
    """Owns the waiting queue, the running batch, the sequences' KV blocks and their batch slots."""

    def __init__(self, block_manager: BlockManager, limits: SchedulingLimits) -> None:
        self.block_manager = block_manager
        self.limits = limits
        self.batch_slots = BatchSlots(limits.max_running_requests)
        self.waiting = WaitingQueue()
        self.running: list[Sequence] = []  # in admission order
        self.num_preemptions = 0  # since start, for metrics and tests

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running)

    def add(self, sequence: Sequence) -> None:
        sequence.status = SequenceStatus.WAITING
        self.waiting.append(sequence)

    def schedule(self) -> ScheduledStep:
        step = ScheduledStep()
        budget = self.limits.max_step_tokens
        for sequence in self.running:
            if sequence.reached_max_output_tokens:
                self._release_batch_slot(sequence)  # its last token is in flight: never scheduled again
        # Decodes before prefill chunks within each priority class, oldest first.
        order = sorted(self.running, key=lambda s: (s.priority, s.num_uncomputed_tokens > 1))
        prefilling = sum(1 for s in self.running if s.num_uncomputed_tokens > 1)
        for sequence in order:
            if budget == 0:
                break
            if sequence.status is not SequenceStatus.RUNNING or sequence.reached_max_output_tokens:
                continue  # preempted earlier in this loop, or its last token is in flight
            num_tokens = self._chunk_size(sequence, budget, contended=prefilling > 1)
            if not self._grow_preempting(sequence, num_tokens, step):
                continue
            step.chunks.append(ScheduledChunk(sequence, sequence.num_computed_tokens, num_tokens))
            budget -= num_tokens
        while self.waiting and budget > 0 and self._has_batch_slot():
            sequence = self.waiting.peek()
            if not self._admit(sequence, step):
                break
            self.waiting.popleft()
            num_reused_blocks = len(sequence.block_table)  # the prefix hit, before growing
            num_tokens = self._chunk_size(sequence, budget, contended=False)
            if not self.block_manager.grow(sequence.block_table, sequence.num_computed_tokens + num_tokens):
                raise RuntimeError("admission checked the blocks of the whole sequence")
            step.chunks.append(ScheduledChunk(sequence, sequence.num_computed_tokens, num_tokens, num_reused_blocks))
            budget -= num_tokens
        return step

    def _num_batch_slots_taken(self) -> int:
        """Running sequences holding a batch slot: all but those whose last token is in flight (they end when it is
        read), unless one of those was preempted and readmitted in this step."""
        return sum(1 for s in self.running if s.batch_slot is not None)

    def _has_batch_slot(self) -> bool:
        return self._num_batch_slots_taken() < self.limits.max_running_requests and self.batch_slots.num_free > 0

    def _chunk_size(self, sequence: Sequence, budget: int, contended: bool) -> int:
        """Tokens to compute for `sequence` this step: a prefill chunk is capped while another prefill
        (running or waiting) competes for the budget."""
        size = min(sequence.num_uncomputed_tokens, budget)
        if size > 1 and (contended or self.waiting):
            size = min(size, self.limits.max_prefill_chunk_tokens)
        return size

    def _admit(self, sequence: Sequence, step: ScheduledStep) -> bool:
        """Moves a waiting sequence into the running batch if its blocks fit; False leaves it waiting."""
        reused = self.block_manager.reuse_prefix(sequence)
        if not sequence.admitted:
            sequence.num_cached_prompt_tokens = min(reused, sequence.num_prompt_tokens)
        while not self._fits(sequence):
            victim = self._newest_batch_sequence() if sequence.priority is Priority.INTERACTIVE else None
            if victim is None:
                self.block_manager.free(sequence)  # give back the reused prefix; it stays cached
                return False
            self._preempt(victim, step)
        sequence.status = SequenceStatus.RUNNING
        sequence.batch_slot = self.batch_slots.acquire()
        sequence.admitted = True
        self.running.append(sequence)
        return True

    def _fits(self, sequence: Sequence) -> bool:
        """Whether a waiting sequence's blocks for its whole known length are free (plus a reserve for running
        decodes when others run) and, when it holds none after prefix reuse, its first block can be had."""
        needed = self.block_manager.blocks_for(sequence.num_tokens) - len(sequence.block_table)
        reserve = len(self.running) and max(1, self.block_manager.num_total_blocks // 64)
        return needed + reserve <= self.block_manager.num_free_blocks and self.block_manager.can_start(sequence)

    def _newest_batch_sequence(self) -> Sequence | None:
        batch = [s for s in self.running if s.priority is Priority.BATCH]
        return batch[-1] if batch else None

    def _grow_preempting(self, sequence: Sequence, num_tokens: int, step: ScheduledStep) -> bool:
        """Makes room for `num_tokens` more tokens of a running sequence, preempting the newest."""
        target = sequence.num_computed_tokens + num_tokens
        while not self.block_manager.grow(sequence.block_table, target):
            victim = self._newest_batch_sequence() or self.running[-1]
            self._preempt(victim, step)
            if victim is sequence:
                return False
        return True

    def _preempt(self, sequence: Sequence, step: ScheduledStep) -> None:
        self.num_preemptions += 1
        self.running.remove(sequence)
        step.chunks = [chunk for chunk in step.chunks if chunk.sequence is not sequence]
        step.preempted.append(sequence)
        self.block_manager.free(sequence)
        self._release_batch_slot(sequence)
        sequence.status = SequenceStatus.WAITING
        self.waiting.appendleft(sequence)

    def finish(self, sequence: Sequence) -> None:
        """Removes a sequence from the queues and frees its blocks and batch slot at once."""
        if sequence.status is SequenceStatus.RUNNING:
            self.running.remove(sequence)
        elif sequence.status is SequenceStatus.WAITING:
            self.waiting.remove(sequence)
        self.block_manager.free(sequence)
        self._release_batch_slot(sequence)
        sequence.status = SequenceStatus.FINISHED

    def _release_batch_slot(self, sequence: Sequence) -> None:
        if sequence.batch_slot is not None:
            self.batch_slots.release(sequence.batch_slot)
            sequence.batch_slot = None
