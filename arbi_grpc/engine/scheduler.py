"""Decides, each step, which sequences run and how many of their tokens: continuous batching with
chunked prefill under a per-step token budget, and preemption by recompute when KV blocks run out.

Running sequences are served first, oldest first (decodes take one token, unfinished prefills take a
chunk); then waiting sequences are admitted in arrival order while budget, batch slots and blocks last.
When a running sequence cannot grow, the most recently admitted one is preempted: its blocks are freed
and it goes back to the front of the queue to be recomputed later.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from arbi_grpc.engine.block_manager import BlockManager
from arbi_grpc.engine.sequence import Sequence, SequenceStatus


@dataclass(frozen=True)
class ScheduledChunk:
    """`num_tokens` tokens of `sequence` from position `start` (its computed tokens when scheduled)."""

    sequence: Sequence
    start: int
    num_tokens: int

    @property
    def completes_sequence(self) -> bool:
        """True when this chunk reaches the last known token, so the step samples a new one."""
        return self.start + self.num_tokens == len(self.sequence.token_ids)


@dataclass
class ScheduledStep:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(chunk.num_tokens for chunk in self.chunks)


class Scheduler:
    """Owns the waiting queue, the running batch and the sequences' KV blocks."""

    def __init__(self, block_manager: BlockManager, max_running: int, max_step_tokens: int) -> None:
        self.block_manager = block_manager
        self.max_running = max_running
        self.max_step_tokens = max_step_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0  # since start, for metrics and tests

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running)

    def add(self, sequence: Sequence) -> None:
        sequence.status = SequenceStatus.WAITING
        self.waiting.append(sequence)

    def schedule(self) -> ScheduledStep:
        step = ScheduledStep()
        budget = self.max_step_tokens
        scheduled: list[Sequence] = []
        while len(scheduled) < len(self.running) and budget > 0:
            sequence = self.running[len(scheduled)]
            num_tokens = min(sequence.num_uncomputed_tokens, budget)
            if not self._grow_preempting(sequence, num_tokens, step):
                break  # `sequence` itself was preempted; everything after it already was
            step.chunks.append(ScheduledChunk(sequence, sequence.num_computed_tokens, num_tokens))
            scheduled.append(sequence)
            budget -= num_tokens
        while self.waiting and budget > 0 and len(self.running) < self.max_running:
            if step.preempted:
                break  # memory is short this step: admitting would only preempt again
            sequence = self.waiting[0]
            num_tokens = min(sequence.num_uncomputed_tokens, budget)
            if not self.block_manager.grow(
                sequence.block_table, sequence.num_computed_tokens + num_tokens
            ):
                break
            self.waiting.popleft()
            sequence.status = SequenceStatus.RUNNING
            self.running.append(sequence)
            step.chunks.append(ScheduledChunk(sequence, sequence.num_computed_tokens, num_tokens))
            budget -= num_tokens
        return step

    def _grow_preempting(self, sequence: Sequence, num_tokens: int, step: ScheduledStep) -> bool:
        """Makes room for `num_tokens` more tokens of a running sequence, preempting the newest."""
        target = sequence.num_computed_tokens + num_tokens
        while not self.block_manager.grow(sequence.block_table, target):
            victim = self.running[-1]
            self._preempt(victim)
            step.preempted.append(victim)
            if victim is sequence:
                return False
        return True

    def _preempt(self, sequence: Sequence) -> None:
        self.num_preemptions += 1
        self.running.remove(sequence)
        self.block_manager.free(sequence.block_table)
        sequence.num_computed_tokens = 0
        sequence.status = SequenceStatus.WAITING
        self.waiting.appendleft(sequence)

    def finish(self, sequence: Sequence) -> None:
        """Removes a sequence from the queues and frees its blocks at once."""
        if sequence.status is SequenceStatus.RUNNING:
            self.running.remove(sequence)
        elif sequence.status is SequenceStatus.WAITING:
            self.waiting.remove(sequence)
        self.block_manager.free(sequence.block_table)
        sequence.status = SequenceStatus.FINISHED
