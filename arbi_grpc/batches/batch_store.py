"""Batch records and their answered lines in the database.

A batch is one JSON row (its `BatchRecord`); each answered or failed input line is a row of its own,
inserted with the batch's updated counts in one transaction, so after a crash the rows say exactly which
lines are done and the counts agree with them. The output and error files are assembled from the rows at
finalize. Like files, a batch belongs to its creating key's tenant: reads given the caller's tenant as
`owner` see only that tenant's batches (None: every batch).
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from dataclasses import dataclass, field

from arbi_grpc.batches.database import Database
from arbi_grpc.errors import InvalidArgumentError, NotFoundError

# Statuses in which the batch still has work to do (resumed at restart).
ACTIVE_STATUSES = ("validating", "in_progress", "finalizing", "cancelling")
ENDED_STATUSES = ("completed", "failed", "cancelled", "expired")
COMPLETION_WINDOW_S = {"24h": 24 * 3600}


class BatchNotFound(NotFoundError):
    """No batch has this id."""


@dataclass
class BatchRecord:
    id: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    created_at: int
    expires_at: int
    total: int = 0
    completed: int = 0
    failed: int = 0
    output_file_id: str = ""
    error_file_id: str = ""
    failure_message: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    tenant: str | None = None  # the creating API key's tenant, which every line runs as (None: the line's own)
    in_progress_at: int = 0
    finalizing_at: int = 0
    completed_at: int = 0
    failed_at: int = 0
    cancelling_at: int = 0
    cancelled_at: int = 0
    expired_at: int = 0

    def moved_to(self, status: str) -> BatchRecord:
        """This batch in `status`, with the transition's time set."""
        return dataclasses.replace(self, status=status, **{f"{status}_at": int(time.time())})


class BatchStore:
    def __init__(self, database: Database) -> None:
        self._database = database

    def create(self, input_file_id: str, endpoint: str, completion_window: str,
               metadata: dict[str, str], tenant: str | None = None) -> BatchRecord:
        if completion_window not in COMPLETION_WINDOW_S:
            raise InvalidArgumentError("completion_window", f"must be 24h, got {completion_window!r}")
        now = int(time.time())
        record = BatchRecord("batch_" + secrets.token_hex(12), endpoint, input_file_id, completion_window,
                             "validating", now, now + COMPLETION_WINDOW_S[completion_window], metadata=metadata,
                             tenant=tenant)
        with self._database.transaction() as connection:
            (seq,) = connection.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM batches").fetchone()
            connection.execute("INSERT INTO batches VALUES (?, ?, ?)", (record.id, seq, _dump(record)))
        return record

    def get(self, batch_id: str, owner: str | None = None) -> BatchRecord:
        rows = self._database.query("SELECT record FROM batches WHERE id = ?", (batch_id,))
        record = BatchRecord(**json.loads(rows[0][0])) if rows else None
        if record is None or (owner is not None and record.tenant != owner):
            raise BatchNotFound(f"no batch has the id {batch_id!r}")
        return record

    def save(self, record: BatchRecord) -> None:
        with self._database.transaction() as connection:
            connection.execute("UPDATE batches SET record = ? WHERE id = ?", (_dump(record), record.id))

    def page(self, after: str, limit: int, owner: str | None = None) -> tuple[list[BatchRecord], bool]:
        """Up to `limit` batches of `owner` (None: everyone's) newest first, after the batch `after` (empty:
        from the newest); and whether more follow."""
        below = 2**62
        if after:
            rows = self._database.query("SELECT seq, json_extract(record, '$.tenant') FROM batches WHERE id = ?",
                                        (after,))
            if not rows or (owner is not None and rows[0][1] != owner):
                raise BatchNotFound(f"no batch has the id {after!r} (after)")
            below = rows[0][0]
        rows = self._database.query(
            "SELECT record FROM batches WHERE seq < ? AND (? IS NULL OR json_extract(record, '$.tenant') = ?) "
            "ORDER BY seq DESC LIMIT ?", (below, owner, owner, limit + 1))
        return [BatchRecord(**json.loads(row[0])) for row in rows[:limit]], len(rows) > limit

    def active(self) -> list[BatchRecord]:
        rows = self._database.query("SELECT record FROM batches ORDER BY seq")
        records = [BatchRecord(**json.loads(row[0])) for row in rows]
        return [record for record in records if record.status in ACTIVE_STATUSES]

    def record_line(self, batch_id: str, line_index: int, failed: bool, line: dict) -> bool:
        """Records the answer (or error) of one input line and counts it; False when the line was already
        recorded (it is never counted twice)."""
        with self._database.transaction() as connection:
            inserted = connection.execute(
                "INSERT OR IGNORE INTO batch_lines VALUES (?, ?, ?, ?)",
                (batch_id, line_index, int(failed), json.dumps(line))).rowcount
            if not inserted:
                return False
            (text,) = connection.execute("SELECT record FROM batches WHERE id = ?", (batch_id,)).fetchone()
            record = BatchRecord(**json.loads(text))
            if failed:
                record.failed += 1
            else:
                record.completed += 1
            connection.execute("UPDATE batches SET record = ? WHERE id = ?", (_dump(record), batch_id))
        return True

    def recorded_indexes(self, batch_id: str) -> set[int]:
        rows = self._database.query("SELECT line_index FROM batch_lines WHERE batch_id = ?", (batch_id,))
        return {row[0] for row in rows}

    def recorded_lines(self, batch_id: str) -> list[tuple[bool, str]]:
        """(failed, JSON line) of every recorded line, in input order."""
        rows = self._database.query(
            "SELECT failed, line FROM batch_lines WHERE batch_id = ? ORDER BY line_index", (batch_id,))
        return [(bool(failed), line) for failed, line in rows]


def _dump(record: BatchRecord) -> str:
    return json.dumps(dataclasses.asdict(record))
