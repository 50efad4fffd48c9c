"""Stored files: content under `<data dir>/files/<id>`, written atomically (temp file, fsync, rename, fsync
of the directory), metadata rows in the database. A file is listed only once its content is on disk."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from arbi_grpc.batches.database import Database
from arbi_grpc.errors import InvalidArgumentError, NotFoundError, ResourceExhaustedError

# Purposes a client may upload with; "batch_output" files are written by the server only.
UPLOAD_PURPOSES = ("batch", "user_data", "assistants", "fine-tune", "vision")
BATCH_OUTPUT_PURPOSE = "batch_output"
CONTENT_CHUNK_BYTES = 1 << 20


class FileNotFound(NotFoundError):
    """No stored file has this id."""


class FileTooLarge(ResourceExhaustedError):
    """An upload beyond the size limit."""


@dataclass(frozen=True)
class FileRecord:
    id: str
    filename: str
    purpose: str
    bytes: int
    created_at: int


def check_upload_purpose(purpose: str) -> None:
    if purpose not in UPLOAD_PURPOSES:
        raise InvalidArgumentError("purpose", f"must be one of {', '.join(UPLOAD_PURPOSES)}, got {purpose!r}")


def atomic_write(path: Path, chunks: Iterable[bytes], max_bytes: int | None = None) -> int:
    """Writes `chunks` to `path` so that `path` holds either nothing or all of them; returns the size.
    Raises FileTooLarge (leaving nothing) once the content passes `max_bytes`."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    size = 0
    try:
        with open(temporary, "wb") as handle:
            for chunk in chunks:
                size += len(chunk)
                if max_bytes is not None and size > max_bytes:
                    raise FileTooLarge(f"the file is larger than the limit of {max_bytes} bytes")
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return size


class FileStore:
    def __init__(self, database: Database, directory: Path) -> None:
        self._database = database
        self._directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        for leftover in directory.glob(".*.tmp"):  # writes a crash interrupted
            leftover.unlink()

    def create(self, filename: str, purpose: str, chunks: Iterable[bytes], max_bytes: int | None = None) -> FileRecord:
        file_id = "file-" + secrets.token_hex(12)
        size = atomic_write(self._directory / file_id, chunks, max_bytes)
        record = FileRecord(file_id, filename, purpose, size, int(time.time()))
        with self._database.transaction() as connection:
            connection.execute("INSERT INTO files VALUES (?, ?, ?, ?, ?)",
                               (record.id, record.filename, record.purpose, record.bytes, record.created_at))
        return record

    def get(self, file_id: str) -> FileRecord:
        rows = self._database.query("SELECT * FROM files WHERE id = ?", (file_id,))
        if not rows:
            raise FileNotFound(f"no file has the id {file_id!r}")
        return FileRecord(*rows[0])

    def page(self, purpose: str = "", after: str = "", limit: int = 10_000,
             ascending: bool = False) -> tuple[list[FileRecord], bool]:
        """Up to `limit` files (of `purpose`, empty: all) newest first, or oldest first when `ascending`,
        after the file `after` (empty: from the first); and whether more follow."""
        start = (-1, -1) if ascending else (2**62, 2**62)
        if after:
            rows = self._database.query("SELECT created_at, rowid FROM files WHERE id = ?", (after,))
            if not rows:
                raise FileNotFound(f"no file has the id {after!r} (after)")
            start = rows[0]
        direction, compare = ("ASC", ">") if ascending else ("DESC", "<")
        rows = self._database.query(
            f"SELECT id, filename, purpose, bytes, created_at FROM files WHERE (? = '' OR purpose = ?) "
            f"AND (created_at, rowid) {compare} (?, ?) ORDER BY created_at {direction}, rowid {direction} LIMIT ?",
            (purpose, purpose, *start, limit + 1))
        return [FileRecord(*row) for row in rows[:limit]], len(rows) > limit

    def read(self, file_id: str) -> bytes:
        self.get(file_id)
        return (self._directory / file_id).read_bytes()

    def chunks(self, file_id: str) -> Iterator[bytes]:
        self.get(file_id)
        with open(self._directory / file_id, "rb") as handle:
            while chunk := handle.read(CONTENT_CHUNK_BYTES):
                yield chunk

    def delete(self, file_id: str) -> None:
        self.get(file_id)
        with self._database.transaction() as connection:
            connection.execute("DELETE FROM files WHERE id = ?", (file_id,))
        (self._directory / file_id).unlink(missing_ok=True)
