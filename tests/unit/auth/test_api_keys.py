"""The API keys file: its line format and errors, lookups by key or by SHA-256, and reloads that keep the
keys in use when the new file is broken, without a key in any message."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest

from arbi_grpc.auth.api_keys import ApiKeys, parse_api_keys
from arbi_grpc.auth.credentials import Caller, Credentials, Role
from arbi_grpc.errors import InvalidArgumentError

KEY_A = "tenant-a-key-0123456789"
KEY_B = "tenant-b-key-0123456789"
KEY_OPS = "operator-key-0123456789"


def _write(path: Path, *entries: dict | str) -> Path:
    path.write_text("".join((entry if isinstance(entry, str) else json.dumps(entry)) + "\n" for entry in entries))
    path.chmod(0o600)
    return path


def test_keys_are_found_by_key_or_sha256_and_never_shown(tmp_path: Path) -> None:
    path = _write(tmp_path / "keys.jsonl", "# tenants", {"key": KEY_A, "tenant": "a"}, "",
                  {"sha256": hashlib.sha256(KEY_B.encode()).hexdigest().upper(), "tenant": "b"},
                  {"key": KEY_OPS, "tenant": "ops", "admin": True})
    keys = ApiKeys(path)
    assert keys.find(KEY_A).tenant == "a" and not keys.find(KEY_A).admin
    assert keys.find(KEY_B).tenant == "b"
    assert keys.find(KEY_OPS).admin
    assert keys.find(KEY_A[:-1]) is None and keys.find("") is None
    shown = repr(keys.find(KEY_A))
    assert KEY_A not in shown and hashlib.sha256(KEY_A.encode()).hexdigest() not in shown
    credentials = Credentials("admin-token-0123456789", "", api_keys=keys)
    assert credentials.generate_guarded
    assert credentials.caller_of(KEY_A) == Caller(Role.GENERATE, "a")
    assert credentials.caller_of(KEY_OPS) == Caller(Role.ADMIN, "ops")
    assert credentials.caller_of("admin-token-0123456789") == Caller(Role.ADMIN)
    assert credentials.caller_of(credentials.internal_token) == Caller(Role.GENERATE)
    assert credentials.caller_of("unknown-key-0123456789") is None


@pytest.mark.parametrize(("line", "message"), [
    ('{"key": "' + KEY_A + '"', "line 2 is not JSON"),
    ('["' + KEY_A + '"]', "line 2 must be an object"),
    ({"key": KEY_A, "tenant": "a", "role": "admin"}, "line 2 must be an object with the fields"),
    ({"key": KEY_A, "sha256": "00" * 32, "tenant": "a"}, "exactly one of 'key' and 'sha256'"),
    ({"tenant": "a"}, "exactly one of 'key' and 'sha256'"),
    ({"key": "short-key", "tenant": "a"}, "at least 16"),
    ({"sha256": "zz" * 32, "tenant": "a"}, "64 hex digits"),
    ({"sha256": "00" * 31, "tenant": "a"}, "64 hex digits"),
    ({"key": KEY_A}, "'tenant' must be a non-empty string"),
    ({"key": KEY_A, "tenant": ""}, "'tenant' must be a non-empty string"),
    ({"key": KEY_A, "tenant": "a", "admin": "yes"}, "'admin' must be true or false"),
    ({"key": KEY_B, "tenant": "b"}, "lists one key twice"),
])
def test_bad_lines_name_their_line_without_the_key(line, message) -> None:
    text = json.dumps({"key": KEY_B, "tenant": "b"}) + "\n" + (line if isinstance(line, str) else json.dumps(line))
    with pytest.raises(InvalidArgumentError, match=message) as error:
        parse_api_keys(text, "keys.jsonl")
    assert KEY_A not in str(error.value) and KEY_B not in str(error.value)


def test_a_missing_or_shared_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="cannot read"):
        ApiKeys(tmp_path / "absent.jsonl")
    path = _write(tmp_path / "keys.jsonl", {"key": KEY_A, "tenant": "a"})
    path.chmod(0o640)  # a group may read it (a Kubernetes Secret through fsGroup)
    assert ApiKeys(path).find(KEY_A).tenant == "a"
    path.chmod(0o644)
    with pytest.raises(InvalidArgumentError, match="chmod o-rwx"):
        ApiKeys(path)


def test_a_changed_file_is_reloaded_and_a_broken_one_keeps_the_keys(tmp_path: Path, caplog) -> None:
    path = _write(tmp_path / "keys.jsonl", {"key": KEY_A, "tenant": "a"})
    keys = ApiKeys(path, reload_interval_s=0)
    assert keys.find(KEY_B) is None
    replacement = _write(tmp_path / "keys.new", {"key": KEY_A, "tenant": "a"}, {"key": KEY_B, "tenant": "b"})
    replacement.replace(path)  # an atomic replace, as an operator's tooling writes it
    assert keys.find(KEY_B).tenant == "b"
    with caplog.at_level(logging.ERROR, logger="arbi_grpc.auth.api_keys"):
        _write(tmp_path / "keys.new", {"key": KEY_A, "tenant": "a"}, '{"key": "' + KEY_OPS).replace(path)
        assert keys.find(KEY_B).tenant == "b" and keys.find(KEY_OPS) is None
    assert "not reloaded" in caplog.text and "line 2 is not JSON" in caplog.text
    assert KEY_A not in caplog.text and KEY_OPS not in caplog.text
    assert not keys.reload()
    path.unlink()
    assert keys.find(KEY_B).tenant == "b"  # a removed file keeps the keys too
    _write(path, {"key": KEY_OPS, "tenant": "ops", "admin": True})  # back: read again
    assert keys.find(KEY_OPS).admin and keys.find(KEY_A) is None
