"""The batching runner of one embedding model: requests queue up and run together on one thread.

An encoder is a prefill-only model with no KV cache, so it runs beside the decoder engine rather than
inside its paged step (docs/embeddings.md says why). Each round takes the queued requests up to
`max_batch_tokens`, interactive ones first and batch-priority ones (batch lines) after them, sorts their
rows by length and runs them in padded chunks of similar length, then hands each request its own rows back.
A request larger than the budget runs alone. A failed forward fails only the requests of its round.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from arbi_grpc.embeddings.embedding_model import EmbeddingModel
from arbi_grpc.embeddings.memory import EMBEDDING_ROWS_PER_CHUNK
from arbi_grpc.engine.request import Priority
from arbi_grpc.errors import UnavailableError


@dataclass
class _Job:
    token_lists: list[list[int]]
    priority: Priority = Priority.INTERACTIVE
    result: Future = field(default_factory=Future)


class EncoderRunner:
    """Runs `model` on a daemon thread; `submit` is safe from any thread."""

    def __init__(self, model: EmbeddingModel, max_batch_tokens: int = 16384) -> None:
        self.model = model
        self.max_batch_tokens = max_batch_tokens
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=f"arbi-encoder-{model.name}", daemon=True)
        self._thread.start()

    def submit(self, token_lists: list[list[int]], priority: Priority = Priority.INTERACTIVE) -> Future:
        """A future of the pooled vectors [len(token_lists), dimensions], in order."""
        if self._closed:
            raise UnavailableError(f"embedding model {self.model.name!r} is unloading")
        job = _Job(token_lists, priority)
        self._jobs.put(job)
        return job.result

    def close(self) -> None:
        """Finishes the queued requests, then stops the thread."""
        self._closed = True
        self._jobs.put(None)
        self._thread.join()

    def _loop(self) -> None:
        waiting: dict[Priority, deque[_Job]] = {Priority.INTERACTIVE: deque(), Priority.BATCH: deque()}
        stop = False
        while not stop or any(waiting.values()):
            if not stop and not any(waiting.values()):
                stop = self._take(waiting, self._jobs.get())
            while not stop:  # everything queued now, so a round sees every interactive request
                try:
                    stop = self._take(waiting, self._jobs.get_nowait())
                except queue.Empty:
                    break
            round_jobs, tokens = [], 0
            for jobs in waiting.values():  # interactive first
                while jobs and (not round_jobs or tokens < self.max_batch_tokens):
                    round_jobs.append(jobs.popleft())
                    tokens += sum(map(len, round_jobs[-1].token_lists))
            if round_jobs:
                self._run_round(round_jobs)

    @staticmethod
    def _take(waiting: dict[Priority, deque[_Job]], job: _Job | None) -> bool:
        """Queues `job` by priority; True for the stop marker."""
        if job is None:
            return True
        waiting[job.priority].append(job)
        return False

    def _run_round(self, jobs: Sequence[_Job]) -> None:
        rows = [(index, ids) for index, job in enumerate(jobs) for ids in job.token_lists]
        order = sorted(range(len(rows)), key=lambda r: len(rows[r][1]))
        try:
            vectors = torch.empty((len(rows), self.model.dimensions), dtype=torch.float32)
            for start in range(0, len(order), EMBEDDING_ROWS_PER_CHUNK):
                chunk = order[start:start + EMBEDDING_ROWS_PER_CHUNK]
                vectors[chunk] = self.model.embed_batch([rows[r][1] for r in chunk])
        except Exception as error:  # noqa: BLE001 (the round's callers get the cause)
            for job in jobs:
                job.result.set_exception(error)
            return
        offset = 0
        for job in jobs:
            job.result.set_result(vectors[offset:offset + len(job.token_lists)])
            offset += len(job.token_lists)
