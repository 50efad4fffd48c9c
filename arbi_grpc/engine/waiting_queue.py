"""The scheduler's waiting queue: one FIFO per priority, interactive served before batch."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from arbi_grpc.engine.request import Priority
from arbi_grpc.engine.sequence import Sequence


class WaitingQueue:
    """Sequences waiting for admission; preempted ones go back to the front of their class."""

    def __init__(self) -> None:
        self._queues: dict[Priority, deque[Sequence]] = {priority: deque() for priority in Priority}

    def __len__(self) -> int:
        return sum(len(queue) for queue in self._queues.values())

    def __iter__(self) -> Iterator[Sequence]:
        for priority in Priority:
            yield from self._queues[priority]

    def __contains__(self, sequence: object) -> bool:
        return any(sequence in queue for queue in self._queues.values())

    def append(self, sequence: Sequence) -> None:
        self._queues[sequence.priority].append(sequence)

    def appendleft(self, sequence: Sequence) -> None:
        self._queues[sequence.priority].appendleft(sequence)

    def peek(self) -> Sequence:
        return next(iter(self))

    def popleft(self) -> Sequence:
        for priority in Priority:
            if self._queues[priority]:
                return self._queues[priority].popleft()
        raise IndexError("the waiting queue is empty")

    def remove(self, sequence: Sequence) -> None:
        self._queues[sequence.priority].remove(sequence)
