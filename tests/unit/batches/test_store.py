"""The data directory's store: atomic writes leave all or nothing, files and batch records survive a reopen,
a batch line is recorded (and counted) once, paging and state transitions, a tenant sees only its own."""

from __future__ import annotations

import pytest

from arbi_grpc.batches.batch_store import BatchStore
from arbi_grpc.batches.database import Database
from arbi_grpc.batches.file_store import FileNotFound, FileStore, FileTooLarge, atomic_write
from arbi_grpc.errors import InvalidArgumentError, NotFoundError


def _stores(directory):
    database = Database(directory / "arbi.sqlite3")
    return database, FileStore(database, directory / "files"), BatchStore(database)


def test_atomic_write_leaves_nothing_when_interrupted(tmp_path):
    target = tmp_path / "content"
    atomic_write(target, [b"old"])

    def failing():
        yield b"new part"
        raise OSError("disk went away")

    with pytest.raises(OSError):
        atomic_write(target, failing())
    with pytest.raises(FileTooLarge):
        atomic_write(target, [b"12345", b"6"], max_bytes=5)
    assert target.read_bytes() == b"old"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["content"]


def test_files_survive_a_reopen_and_delete_removes_content(tmp_path):
    database, files, _ = _stores(tmp_path)
    record = files.create("a.jsonl", "batch", [b"line 1\n", b"line 2\n"])
    database.close()
    database, files, _ = _stores(tmp_path)
    assert files.get(record.id) == record and record.bytes == 14
    assert b"".join(files.chunks(record.id)) == b"line 1\nline 2\n"
    assert files.page("batch") == ([record], False) and files.page("user_data") == ([], False)
    files.delete(record.id)
    with pytest.raises(FileNotFound):
        files.get(record.id)
    assert not (tmp_path / "files" / record.id).exists()


def test_files_page_in_either_order_after_a_cursor(tmp_path):
    _, files, _ = _stores(tmp_path)
    created = [files.create(f"{index}.jsonl", "batch" if index % 2 else "user_data", [b"x"]) for index in range(5)]
    newest_first = [record.id for record in reversed(created)]
    pages, after = [], ""
    while True:
        page, more = files.page(after=after, limit=2)
        pages.append([record.id for record in page])
        if not more:
            break
        after = page[-1].id
    assert pages == [newest_first[:2], newest_first[2:4], newest_first[4:]]
    oldest_first, _ = files.page(after=created[1].id, limit=10, ascending=True)
    assert [record.id for record in oldest_first] == [record.id for record in created[2:]]
    assert files.page("batch", limit=1) == ([created[3]], True)
    with pytest.raises(FileNotFound, match="after"):
        files.page(after="file-nope")


def test_a_line_is_recorded_once_and_counted_once(tmp_path):
    database, _, batches = _stores(tmp_path)
    record = batches.create("file-x", "/v1/chat/completions", "24h", {"k": "v"})
    record.total = 3
    batches.save(record.moved_to("in_progress"))
    assert batches.record_line(record.id, 1, False, {"custom_id": "b"})
    assert not batches.record_line(record.id, 1, False, {"custom_id": "b again"})
    assert batches.record_line(record.id, 0, True, {"custom_id": "a"})
    database.close()
    database, _, batches = _stores(tmp_path)
    reopened = batches.get(record.id)
    assert (reopened.status, reopened.completed, reopened.failed, reopened.metadata) == ("in_progress", 1, 1, {"k": "v"})
    assert reopened.in_progress_at >= reopened.created_at > 0
    assert batches.recorded_indexes(record.id) == {0, 1}
    assert batches.recorded_lines(record.id) == [(True, '{"custom_id": "a"}'), (False, '{"custom_id": "b"}')]
    assert [entry.id for entry in batches.active()] == [record.id]
    batches.save(reopened.moved_to("completed"))
    assert batches.active() == []


def test_pages_newest_first(tmp_path):
    _, _, batches = _stores(tmp_path)
    ids = [batches.create("file-x", "/v1/completions", "24h", {}).id for _ in range(5)]
    first, more = batches.page("", 2)
    assert [entry.id for entry in first] == ids[:2:-1][:2] and more
    rest, more = batches.page(first[-1].id, 10)
    assert [entry.id for entry in rest] == ids[2::-1] and not more
    with pytest.raises(InvalidArgumentError):
        batches.create("file-x", "/v1/completions", "1h", {})


def test_files_and_batches_are_seen_only_by_their_tenant(tmp_path):
    _, files, batches = _stores(tmp_path)
    mine = files.create("a.jsonl", "batch", [b"x\n"], owner="tenant-a")
    theirs = files.create("b.jsonl", "batch", [b"y\n"], owner="tenant-b")
    assert files.page(owner="tenant-a") == ([mine], False)
    assert files.page(ascending=True) == ([mine, theirs], False)  # no owner: every file
    for read in (files.get, files.read, lambda file_id, owner: list(files.chunks(file_id, owner)), files.delete):
        with pytest.raises(FileNotFound):
            read(theirs.id, "tenant-a")
    with pytest.raises(FileNotFound):
        files.page(after=theirs.id, owner="tenant-a")
    batch = batches.create(mine.id, "/v1/chat/completions", "24h", {}, tenant="tenant-a")
    batches.create(theirs.id, "/v1/chat/completions", "24h", {}, tenant="tenant-b")
    assert [record.id for record in batches.page("", 10, owner="tenant-a")[0]] == [batch.id]
    assert len(batches.page("", 10)[0]) == 2
    assert batches.get(batch.id, "tenant-a") == batch
    with pytest.raises(NotFoundError):
        batches.get(batch.id, "tenant-b")


def test_a_database_from_before_file_owners_gains_the_column(tmp_path):
    import sqlite3

    connection = sqlite3.connect(tmp_path / "arbi.sqlite3")
    connection.execute("CREATE TABLE files (id TEXT PRIMARY KEY, filename TEXT NOT NULL, purpose TEXT NOT NULL, "
                       "bytes INTEGER NOT NULL, created_at INTEGER NOT NULL)")
    connection.execute("INSERT INTO files VALUES ('file-old', 'old.jsonl', 'batch', 3, 1)")
    connection.commit()
    connection.close()
    (tmp_path / "files").mkdir()
    _, files, _ = _stores(tmp_path)
    assert files.get("file-old").owner is None
    assert files.create("new.jsonl", "batch", [b"z\n"], owner="t").owner == "t"
