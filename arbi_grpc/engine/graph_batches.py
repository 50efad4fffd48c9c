"""Which decode batch sizes get a CUDA graph: shared by the runner that captures them and by the memory
estimate that sizes their pool before anything is loaded (so this module imports no torch)."""

from __future__ import annotations

SMALL_GRAPH_BATCHES = (1, 2, 4)
GRAPH_BATCH_STEP = 8


def graph_batch_sizes(max_batch: int) -> tuple[int, ...]:
    """1, 2, 4, then every multiple of 8 up to `max_batch` and `max_batch` itself (padding wastes at most 7
    rows past 8); empty for `max_batch` <= 0."""
    if max_batch <= 0:
        return ()
    sizes = [size for size in SMALL_GRAPH_BATCHES if size < max_batch]
    sizes += range(GRAPH_BATCH_STEP, max_batch + 1, GRAPH_BATCH_STEP)
    if not sizes or sizes[-1] != max_batch:
        sizes.append(max_batch)
    return tuple(sizes)
