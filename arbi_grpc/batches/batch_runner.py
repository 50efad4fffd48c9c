"""Runs batches: validates a create, answers the input lines not yet recorded (at most `max_in_flight`
lines of all batches at once, at batch priority, while a model is serving), honours cancel and expiry, and finalizes: assembles the
output and error files from the recorded lines.

Durability: a line counts as answered only once `BatchStore.record_line` committed it; at restart every
active batch resumes from the lines without a record, so none is lost and none answered twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from arbi_grpc.batches.batch_lines import BATCH_ENDPOINTS, LineError, LineRunner, error_line, output_line, parse_line
from arbi_grpc.batches.batch_store import ENDED_STATUSES, BatchRecord, BatchStore
from arbi_grpc.batches.file_store import BATCH_OUTPUT_PURPOSE, FileStore
from arbi_grpc.errors import FailedPreconditionError, InvalidArgumentError

_LOG = logging.getLogger(__name__)


class BatchRunner:
    def __init__(self, store: BatchStore, files: FileStore, lines: LineRunner, max_in_flight: int) -> None:
        self._store = store
        self._files = files
        self._lines = lines
        self._slots = asyncio.Semaphore(max_in_flight)
        self._tasks: dict[str, asyncio.Task] = {}
        self._cancelled: set[str] = set()
        self.serving = asyncio.Event()  # set while a model can admit requests; lines wait for it

    def create(self, input_file_id: str, endpoint: str, completion_window: str,
               metadata: dict[str, str], tenant: str | None = None) -> BatchRecord:
        if endpoint not in BATCH_ENDPOINTS:
            raise InvalidArgumentError("endpoint", f"must be one of {', '.join(BATCH_ENDPOINTS)}, got {endpoint!r}")
        input_file = self._files.get(input_file_id, tenant)
        if input_file.purpose != "batch":
            raise InvalidArgumentError("input_file_id", f"the file's purpose is {input_file.purpose!r}, not 'batch'")
        lines = self._input_lines(input_file_id)
        if not lines:
            raise InvalidArgumentError("input_file_id", "the input file has no lines")
        record = self._store.create(input_file_id, endpoint, completion_window, metadata, tenant)
        record.total = len(lines)
        record = record.moved_to("in_progress")
        self._store.save(record)
        self._start(record.id)
        return record

    def cancel(self, batch_id: str, owner: str | None = None) -> BatchRecord:
        record = self._store.get(batch_id, owner)
        if record.status in ENDED_STATUSES:
            raise FailedPreconditionError(f"batch {batch_id!r} already ended ({record.status})")
        if record.status not in ("cancelling", "finalizing"):
            record = record.moved_to("cancelling")
            self._store.save(record)
        self._cancelled.add(batch_id)
        return record

    def resume(self) -> None:
        """Starts every batch a previous process left active."""
        for record in self._store.active():
            self._start(record.id)

    async def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    def _start(self, batch_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self._run(batch_id))
        self._tasks[batch_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(batch_id, None))

    def _input_lines(self, file_id: str) -> list[str]:
        text = self._files.read(file_id).decode("utf-8", errors="replace")
        return [line for line in text.splitlines() if line.strip()]

    async def _run(self, batch_id: str) -> None:
        try:
            record = self._store.get(batch_id)
            if record.status in ("in_progress", "validating"):
                await self._answer_lines(record)
            await self._finalize(batch_id)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug or a full disk: the batch fails rather than hangs
            _LOG.exception("batch %s failed", batch_id)
            record = self._store.get(batch_id).moved_to("failed")
            record.failure_message = "the server failed while running the batch; see its log"
            self._store.save(record)

    async def _answer_lines(self, record: BatchRecord) -> None:
        lines = self._input_lines(record.input_file_id)
        done = self._store.recorded_indexes(record.id)
        seen_ids: dict[str, int] = {}
        pending: set[asyncio.Task] = set()
        for index, text in enumerate(lines):
            custom_id = _custom_id_of(text)
            duplicate = custom_id is not None and custom_id in seen_ids
            if custom_id is not None:
                seen_ids.setdefault(custom_id, index)
            if index in done:
                continue
            await self.serving.wait()
            await self._slots.acquire()
            if record.id in self._cancelled or time.time() > record.expires_at:
                self._slots.release()
                break
            pending.add(asyncio.ensure_future(self._answer(record, index, text, duplicate)))
            pending = {task for task in pending if not task.done()}
        await asyncio.gather(*pending)

    async def _answer(self, record: BatchRecord, index: int, text: str, duplicate: bool) -> None:
        custom_id = _custom_id_of(text)
        try:
            if duplicate:
                raise LineError("duplicate_custom_id", f"custom_id {custom_id!r} is used by an earlier line")
            line = parse_line(text, record.endpoint)
            body = await self._lines.answer(line, record.tenant)
            self._store.record_line(record.id, index, False, output_line(custom_id, 200, body))
        except LineError as error:
            self._store.record_line(record.id, index, True, error_line(custom_id, error))
        finally:
            self._slots.release()

    async def _finalize(self, batch_id: str) -> None:
        record = self._store.get(batch_id)
        if record.status in ENDED_STATUSES:
            return
        ended = ("cancelled" if record.status == "cancelling" or batch_id in self._cancelled
                 else "expired" if time.time() > record.expires_at else "completed")
        if record.status != "finalizing":
            record = record.moved_to("finalizing")
            self._store.save(record)
        recorded = self._store.recorded_lines(batch_id)
        if ended == "completed" and len(recorded) < record.total:  # a line left unrecorded is a bug
            raise RuntimeError(f"batch {batch_id}: {len(recorded)} of {record.total} lines recorded")
        for failed, attribute in ((False, "output_file_id"), (True, "error_file_id")):
            content = "".join(line + "\n" for is_error, line in recorded if is_error is failed).encode()
            if content:
                stored = self._files.create(f"{batch_id}_{'error' if failed else 'output'}.jsonl",
                                            BATCH_OUTPUT_PURPOSE, [content], owner=record.tenant)
                setattr(record, attribute, stored.id)
        record = record.moved_to(ended)
        self._store.save(record)
        self._cancelled.discard(batch_id)


def _custom_id_of(text: str) -> str | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    custom_id = value.get("custom_id") if isinstance(value, dict) else None
    return custom_id if isinstance(custom_id, str) else None
