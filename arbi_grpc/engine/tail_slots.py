"""The tail slots of the KV cache: one per running sequence, where a TKV cache keeps the sequence's last
`exact_blocks` blocks exact (a ring). The scheduler hands them out; other caches ignore them but the engine
assigns them all the same.
"""

from __future__ import annotations

import heapq


class TailSlots:
    """Slot ids 0..num_slots-1, each free or taken; `acquire` takes the lowest free one.

    Releasing a slot whose step is still in flight on the device is safe: a later step that reuses the slot
    writes it after the earlier step's reads, in the device's queue.
    """

    def __init__(self, num_slots: int) -> None:
        if num_slots <= 0:
            raise ValueError(f"a tail slot pool needs at least one slot, got {num_slots}")
        self.num_slots = num_slots
        self._free = list(range(num_slots))  # a heap of free ids
        self._taken: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_taken(self) -> int:
        return len(self._taken)

    def acquire(self) -> int:
        if not self._free:
            raise RuntimeError(f"every one of the {self.num_slots} tail slots is taken")
        slot = heapq.heappop(self._free)
        self._taken.add(slot)
        return slot

    def release(self, slot: int) -> None:
        if not 0 <= slot < self.num_slots:
            raise RuntimeError(f"tail slot {slot} is not one of the pool's slots 0..{self.num_slots - 1}")
        if slot not in self._taken:
            raise RuntimeError(f"tail slot {slot} released but it is free")
        self._taken.remove(slot)
        heapq.heappush(self._free, slot)
