"""Rank 0's side of a tensor-parallel model: `WorkerRanks.start` spawns ranks 1..N-1 as subprocesses
(`python -m arbi_grpc.parallel.worker`) that meet rank 0 at a TCP store on 127.0.0.1, and joins the process
group with them; the handle then sends each step's inputs, keeps idle workers' waits inside the collective
timeout, watches the processes, and stops them with the engine.

A worker that exits unasked is reported at once (the log names its rank, pid and exit code): the other workers
are stopped and the engine fails (`Engine.fail`), so the server stops serving and `serve` exits non-zero.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import Tensor

from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.step_inputs import StepInputs
from arbi_grpc.errors import ArbiError, UnavailableError
from arbi_grpc.parallel.group import (
    COLLECTIVE_TIMEOUT_S,
    TensorParallelGroup,
    check_no_tensor_parallel_group,
    close_tensor_parallel_group,
    init_tensor_parallel_group,
    rank_device,
)
from arbi_grpc.parallel.step_broadcast import KEEPALIVE, STOP, broadcast_message

log = logging.getLogger(__name__)

KEEPALIVE_S = COLLECTIVE_TIMEOUT_S / 4  # an idle engine sends a keepalive this long after its last message
WATCH_INTERVAL_S = 0.2
STOP_WAIT_S = 10.0


class RankLostError(ArbiError):
    """A tensor-parallel rank exited or stopped answering: the model cannot run any more steps."""

    code = "UNAVAILABLE"


class FailableEngine(Protocol):
    """What the ranks need of the engine (`engine.Engine`)."""

    def fail(self, error: Exception) -> None: ...

    def call(self, function: Callable[[], Any]) -> Future: ...


class WorkerRanks:
    """Ranks 1..N-1 of the resident model, as rank 0 drives them."""

    def __init__(self, processes: list[subprocess.Popen]) -> None:
        self.processes = processes  # processes[i] is rank i + 1
        self._engine: FailableEngine | None = None
        self._joined = False  # rank 0 is in the process group
        self._ready = False  # every worker passed the barrier: each one waits for messages from here on
        self._stopping = threading.Event()
        self._abandoned = threading.Event()  # `abandon` killed the workers: their exits are not news
        self._last_sent_s = time.monotonic()
        self._watcher = threading.Thread(target=self._watch, name="arbi-tp-watch", daemon=True)
        self._watcher.start()

    @classmethod
    def start(cls, config: EngineConfig, model_dir: Path, num_blocks: int,
              max_model_len: int) -> tuple[WorkerRanks, TensorParallelGroup]:
        """Spawns the workers for `config.tensor_parallel_size` ranks and joins their process group as rank 0
        (the current process's device becomes GPU 0 on CUDA). Raises RankLostError if the rendezvous fails."""
        check_no_tensor_parallel_group()  # before any worker starts
        world_size = config.tensor_parallel_size
        address = f"127.0.0.1:{_free_port()}"
        settings = json.dumps(dataclasses.asdict(config))
        processes = [
            subprocess.Popen([sys.executable, "-m", "arbi_grpc.parallel.worker", "--rank", str(rank),
                              "--world-size", str(world_size), "--init-address", address,
                              "--model-dir", str(model_dir), "--num-blocks", str(num_blocks),
                              "--max-model-len", str(max_model_len), "--config", settings])
            for rank in range(1, world_size)
        ]
        ranks = cls(processes)
        log.info("tensor parallelism: started ranks 1..%d (pids %s), meeting at %s", world_size - 1,
                 ", ".join(str(process.pid) for process in processes), address)
        try:
            group = init_tensor_parallel_group(0, world_size, address, rank_device(torch.device(config.device), 0))
        except BaseException as error:
            ranks.close()
            raise RankLostError(f"tensor-parallel ranks did not meet at {address} ({ranks._exits()}): "
                                f"{error}") from error
        ranks._joined = True
        return ranks, group

    def wait_ready(self) -> None:
        """Waits until every worker holds its shard and KV pool (the workers' barrier); they profile the largest
        step next, with rank 0's `measure_budget`."""
        try:
            dist.barrier()
        except RuntimeError as error:
            raise RankLostError(f"a tensor-parallel rank failed while loading its shard ({self._exits()}): "
                                f"{error}") from error
        self._ready = True

    def watch(self, engine: FailableEngine) -> None:
        """From now on a lost worker fails `engine`, and an idle `engine` sends the workers keepalives."""
        self._engine = engine
        threading.Thread(target=self._keep_alive, name="arbi-tp-keepalive", daemon=True).start()

    def send_step(self, inputs: StepInputs, input_ids: Tensor) -> None:
        """On the engine thread: the workers run the step `inputs` lays out on `input_ids` with rank 0."""
        self._last_sent_s = time.monotonic()
        broadcast_message(inputs, input_ids)

    def abandon(self, error: Exception) -> None:
        """On the engine thread, when a step failed on rank 0 partway: the ranks' collectives are out of step,
        so the workers are killed and the engine fails (the step's own failure does not stop the server)."""
        lost = RankLostError(f"a step failed on rank 0 ({error!r}); the tensor-parallel ranks are out of step")
        log.error("%s: stopping the worker ranks and the engine", lost)
        self._abandoned.set()
        self._kill_workers()
        if self._engine is not None:
            self._engine.fail(lost)

    def close(self) -> None:
        """Stops the workers (the stop message when all are up and waiting for messages, then SIGTERM and
        SIGKILL for any still running after STOP_WAIT_S) and leaves the process group. On the engine thread once
        its loop has ended, or on the boot's thread when the boot fails."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._ready and not self._abandoned.is_set() and all(process.poll() is None for process in self.processes):
            try:
                broadcast_message(STOP)
            except RuntimeError as error:
                log.warning("tensor parallelism: the stop message did not reach every rank (%s)", error)
        for process in self.processes:
            _end(process)
        if self._joined:
            close_tensor_parallel_group()
        log.info("tensor parallelism: worker ranks stopped (%s)", self._exits())

    def _send_keepalive(self) -> None:
        if not self._stopping.is_set() and time.monotonic() - self._last_sent_s >= KEEPALIVE_S:
            self._last_sent_s = time.monotonic()
            broadcast_message(KEEPALIVE)

    def _keep_alive(self) -> None:
        while not self._stopping.wait(KEEPALIVE_S / 4):
            if time.monotonic() - self._last_sent_s >= KEEPALIVE_S and self._engine is not None:
                # On the engine thread, between its steps.
                self._engine.call(self._send_keepalive).add_done_callback(self._keepalive_sent)

    def _keepalive_sent(self, future: Future) -> None:
        error = future.exception()
        if isinstance(error, UnavailableError):  # the engine is stopping; its loop's end stops the ranks
            return
        if error is not None and not self._stopping.is_set() and self._engine is not None:
            log.error("tensor parallelism: a keepalive did not reach the worker ranks (%r): stopping the engine", error)
            self._engine.fail(RankLostError(f"the worker ranks stopped answering ({error!r})"))

    def _watch(self) -> None:
        while not self._stopping.wait(WATCH_INTERVAL_S):
            lost = [(rank, process) for rank, process in enumerate(self.processes, start=1)
                    if process.poll() is not None]
            if not lost:
                continue
            if self._stopping.is_set() or self._abandoned.is_set():
                return
            rank, process = lost[0]
            error = RankLostError(f"tensor-parallel rank {rank} (pid {process.pid}) exited with code "
                                  f"{process.returncode}; the model cannot run without it")
            log.error("%s: stopping the other ranks and the engine", error)
            self._kill_workers()
            if self._engine is not None:
                self._engine.fail(error)
            return

    def _kill_workers(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()

    def _exits(self) -> str:
        return ", ".join(f"rank {rank}: {'running' if process.poll() is None else f'exit {process.returncode}'}"
                         for rank, process in enumerate(self.processes, start=1))


def _end(process: subprocess.Popen) -> None:
    """Waits for `process` to exit, terminating and then killing it if it does not in time."""
    for signal_process in (None, process.terminate, process.kill):
        if signal_process is not None:
            signal_process()
        try:
            process.wait(timeout=STOP_WAIT_S)
            return
        except subprocess.TimeoutExpired:
            continue


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
