"""How many CPU threads torch uses in each rank of a tensor-parallel model, and which thread's OpenMP team runs them."""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from pathlib import Path

import torch

from arbi_grpc.config import EngineConfig

log = logging.getLogger(__name__)
OMP_PAUSE_SOFT = 1  # omp_pause_resource_t: the threads end, the runtime stays initialised


def set_rank_threads(config: EngineConfig, world_size: int) -> None:
    """--torch-threads in every rank when set; else, on the CPU, the cores shared evenly among the ranks (each
    rank's own default would take every core, and the ranks would contend for them at every all-reduce)."""
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    elif config.device == "cpu" and world_size > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))


def release_openmp_workers() -> bool:
    """Ends the OpenMP worker threads that this thread's own parallel work started (loading a model does), so that
    the engine thread's team is the only one left; returns whether it did (False where torch's OpenMP runtime is not
    a libgomp with `omp_pause_resource_all`, or it refused). libgomp counts the workers of every thread's team, and
    once they outnumber the cores each one sleeps almost at once after a parallel region instead of spinning for the
    next, so a CPU decode step, hundreds of short regions, waits on a thread wake-up at each (docs/benchmarks.md,
    "The embedded default on the CPU against llama.cpp"). Call it on the thread that did the work, outside any
    parallel region; a later parallel op there starts a new team."""
    pause = _omp_pause_resource_all()
    if pause is None:
        return False
    released = pause(OMP_PAUSE_SOFT) == 0
    if not released:
        log.warning("OpenMP refused to end this thread's workers; CPU steps may wait on thread wake-ups")
    return released


@functools.cache
def _omp_pause_resource_all():
    """omp_pause_resource_all of the libgomp this process loaded (torch's), or None."""
    try:
        mapped = Path("/proc/self/maps").read_text().splitlines()
    except OSError:  # not Linux
        return None
    libraries = {line.split()[-1] for line in mapped if "/libgomp" in line and ".so" in line}
    for path in sorted(libraries):
        function = getattr(ctypes.CDLL(path), "omp_pause_resource_all", None)  # OpenMP 5.0: GCC 9 and later
        if function is not None:
            function.argtypes, function.restype = [ctypes.c_int], ctypes.c_int
            return function
    return None
