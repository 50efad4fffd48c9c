"""The data directory's SQLite database (WAL mode): the tables of files, batches and answered batch lines.

One connection shared by the server's threads behind a lock; every write is its own transaction, committed
before the caller goes on, so what a write recorded survives a SIGKILL right after it. A database written
before files had an owner gains the column (NULL: uploaded without an API key).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    id TEXT PRIMARY KEY, filename TEXT NOT NULL, purpose TEXT NOT NULL, bytes INTEGER NOT NULL,
    created_at INTEGER NOT NULL, owner TEXT);
CREATE TABLE IF NOT EXISTS batches (
    id TEXT PRIMARY KEY, seq INTEGER NOT NULL, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS batch_lines (
    batch_id TEXT NOT NULL, line_index INTEGER NOT NULL, failed INTEGER NOT NULL, line TEXT NOT NULL,
    PRIMARY KEY (batch_id, line_index));
"""


class Database:
    """`path`'s database, created with the schema when missing."""

    def __init__(self, path: Path) -> None:
        self._connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._connection.execute("PRAGMA journal_mode=WAL")
        self._connection.execute("PRAGMA synchronous=FULL")  # a commit is on disk when it returns
        self._connection.executescript(_SCHEMA)
        file_columns = {row[1] for row in self._connection.execute("PRAGMA table_info(files)")}
        if "owner" not in file_columns:
            self._connection.execute("ALTER TABLE files ADD COLUMN owner TEXT")
        self._lock = threading.Lock()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._connection.execute("BEGIN IMMEDIATE")
            try:
                yield self._connection
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
            self._connection.execute("COMMIT")

    def query(self, sql: str, parameters: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._connection.execute(sql, parameters).fetchall()

    def close(self) -> None:
        with self._lock:
            self._connection.close()
