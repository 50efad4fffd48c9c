"""The batch slots: one per running sequence (llama.cpp's sense of a slot), a small stable id that the sequence
keeps while it runs and that no other running sequence holds. The scheduler hands them out; a KV storage may keep
state per slot (`KVStorage.num_batch_slots`), others ignore the id.
"""

from __future__ import annotations

import heapq


class BatchSlots:
    """Slot ids 0..num_slots-1, each free or taken; `acquire` takes the lowest free one.

    Releasing a slot whose step is still in flight on the device is safe: a later step that reuses the slot
    writes it after the earlier step's reads, in the device's queue.
    """

    def __init__(self, num_slots: int) -> None:
        if num_slots <= 0:
            raise ValueError(f"a batch slot pool needs at least one slot, got {num_slots}")
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
            raise RuntimeError(f"every one of the {self.num_slots} batch slots is taken")
        slot = heapq.heappop(self._free)
        self._taken.add(slot)
        return slot

    def release(self, slot: int) -> None:
        if not 0 <= slot < self.num_slots:
            raise RuntimeError(f"batch slot {slot} is not one of the pool's slots 0..{self.num_slots - 1}")
        if slot not in self._taken:
            raise RuntimeError(f"batch slot {slot} released but it is free")
        self._taken.remove(slot)
        heapq.heappush(self._free, slot)
