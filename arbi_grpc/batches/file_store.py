"""Stored files: content under `<data dir>/files/<id>`, written atomically (temp file, fsync, rename, fsync
of the directory), metadata rows in the database. A file is listed only once its content is on disk.

A file belongs to the tenant of the API key that uploaded it (or of the batch that wrote it). Every read
takes the caller's tenant as `owner`: a caller with a tenant sees only its own files, and another tenant's
file answers as not found; `owner=None` (a call made without an API key) sees every file.
"""

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
_COLUMNS = "id, filename, purpose, bytes, created_at, owner"


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
    owner: str | None = None  # the uploading API key's tenant; None: uploaded without one

    def visible_to(self, owner: str | None) -> bool:
        return owner is None or self.owner == owner


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

    def create(self, filename: str, purpose: str, chunks: Iterable[bytes], max_bytes: int | None = None,
               owner: str | None = None) -> FileRecord:
        file_id = "file-" + secrets.token_hex(12)
        size = atomic_write(self._directory / file_id, chunks, max_bytes)
        record = FileRecord(file_id, filename, purpose, size, int(time.time()), owner)
        with self._database.transaction() as connection:
            connection.execute(f"INSERT INTO files ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                               (record.id, record.filename, record.purpose, record.bytes, record.created_at,
                                record.owner))
        return record

    def get(self, file_id: str, owner: str | None = None) -> FileRecord:
        rows = self._database.query(f"SELECT {_COLUMNS} FROM files WHERE id = ?", (file_id,))
        if not rows or not FileRecord(*rows[0]).visible_to(owner):
            raise FileNotFound(f"no file has the id {file_id!r}")
        return FileRecord(*rows[0])

    def page(self, purpose: str = "", after: str = "", limit: int = 10_000,
             ascending: bool = False, owner: str | None = None) -> tuple[list[FileRecord], bool]:
        """Up to `limit` files of `owner` (None: everyone's) and of `purpose` (empty: all) newest first, or
        oldest first when `ascending`, after the file `after` (empty: from the first); and whether more follow."""
        start = (-1, -1) if ascending else (2**62, 2**62)
        if after:
            rows = self._database.query("SELECT created_at, rowid, owner FROM files WHERE id = ?", (after,))
            if not rows or (owner is not None and rows[0][2] != owner):
                raise FileNotFound(f"no file has the id {after!r} (after)")
            start = rows[0][:2]
        direction, compare = ("ASC", ">") if ascending else ("DESC", "<")
        rows = self._database.query(
            f"SELECT {_COLUMNS} FROM files WHERE (? = '' OR purpose = ?) AND (? IS NULL OR owner = ?) "
            f"AND (created_at, rowid) {compare} (?, ?) ORDER BY created_at {direction}, rowid {direction} LIMIT ?",
            (purpose, purpose, owner, owner, *start, limit + 1))
        return [FileRecord(*row) for row in rows[:limit]], len(rows) > limit

    def read(self, file_id: str, owner: str | None = None) -> bytes:
        self.get(file_id, owner)
        return (self._directory / file_id).read_bytes()

    def chunks(self, file_id: str, owner: str | None = None) -> Iterator[bytes]:
        self.get(file_id, owner)
        with open(self._directory / file_id, "rb") as handle:
            while chunk := handle.read(CONTENT_CHUNK_BYTES):
                yield chunk

    def delete(self, file_id: str, owner: str | None = None) -> None:
        self.get(file_id, owner)
        with self._database.transaction() as connection:
            connection.execute("DELETE FROM files WHERE id = ?", (file_id,))
        (self._directory / file_id).unlink(missing_ok=True)
