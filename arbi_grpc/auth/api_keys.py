"""The API keys file: per-caller credentials, each naming its tenant and whether it may use AdminService.

The file (`--api-keys-file`) holds JSON lines, blank lines and `#` comments aside; each line is
`{"key": "<at least 16 characters>"}` or `{"sha256": "<64 hex digits of the key's SHA-256>"}`, with
`"tenant": "<non-empty>"` and optionally `"admin": true`. Other users may not access it (a group may read
it: Kubernetes mounts a Secret owned by root, readable through the pod's fsGroup). Only the keys' SHA-256
digests are kept; a presented key is hashed and compared with every
digest through `hmac.compare_digest`. The file is re-read when its modification time, size or inode
changes (checked at most once per `reload_interval_s`): a file that no longer parses keeps the keys in use
and logs the error (the path and the line number, never a key).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from arbi_grpc.errors import InvalidArgumentError

log = logging.getLogger(__name__)

_MIN_KEY_CHARS = 16
_FIELDS = {"key", "sha256", "tenant", "admin"}


@dataclass(frozen=True)
class ApiKey:
    """One accepted key: the SHA-256 of its text, its tenant, whether it grants AdminService."""

    digest: bytes = field(repr=False)
    tenant: str
    admin: bool = False


def key_digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def parse_api_keys(text: str, source: str) -> tuple[ApiKey, ...]:
    """The keys of a keys file's `text`; InvalidArgumentError naming `source` and the line otherwise."""
    keys: list[ApiKey] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{source} line {number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as error:
            raise InvalidArgumentError("api_keys_file", f"{where} is not JSON ({error.msg})") from None
        keys.append(_entry_key(entry, where))
    digests = [key.digest for key in keys]
    if len(set(digests)) != len(digests):
        raise InvalidArgumentError("api_keys_file", f"{source} lists one key twice")
    return tuple(keys)


def _entry_key(entry: object, where: str) -> ApiKey:
    if not isinstance(entry, dict) or set(entry) - _FIELDS:
        raise InvalidArgumentError("api_keys_file", f"{where} must be an object with the fields "
                                                    f"{', '.join(sorted(_FIELDS))} only")
    if ("key" in entry) == ("sha256" in entry):
        raise InvalidArgumentError("api_keys_file", f"{where} needs exactly one of 'key' and 'sha256'")
    if "key" in entry:
        key = entry["key"]
        if not isinstance(key, str) or len(key) < _MIN_KEY_CHARS or not key.isprintable() or " " in key:
            raise InvalidArgumentError("api_keys_file", f"{where}: 'key' must be at least {_MIN_KEY_CHARS} "
                                                        "printable characters without spaces")
        digest = key_digest(key)
    else:
        hexdigest = entry["sha256"]
        try:
            digest = bytes.fromhex(hexdigest) if isinstance(hexdigest, str) else b""
        except ValueError:
            digest = b""
        if len(digest) != hashlib.sha256().digest_size:
            raise InvalidArgumentError("api_keys_file", f"{where}: 'sha256' must be 64 hex digits")
    tenant, admin = entry.get("tenant"), entry.get("admin", False)
    if not isinstance(tenant, str) or not tenant:
        raise InvalidArgumentError("api_keys_file", f"{where}: 'tenant' must be a non-empty string")
    if not isinstance(admin, bool):
        raise InvalidArgumentError("api_keys_file", f"{where}: 'admin' must be true or false")
    return ApiKey(digest, tenant, admin)


class ApiKeys:
    """The keys of `path`, read now (a bad file raises) and re-read when the file changes."""

    def __init__(self, path: Path, reload_interval_s: float = 1.0) -> None:
        self.path = path
        self._interval_s = reload_interval_s
        self._lock = threading.Lock()
        try:
            self._signature = self._stat_signature()
            self._keys = self._read()
        except OSError as error:
            raise InvalidArgumentError("api_keys_file", f"cannot read {path}: {error.strerror}") from None
        self._checked_at = time.monotonic()

    def find(self, token: str) -> ApiKey | None:
        """The key `token` is, or None; every digest is compared, each in constant time."""
        self._reload_if_changed()
        presented = key_digest(token)
        found = None
        for key in self._keys:
            if hmac.compare_digest(presented, key.digest):
                found = key
        return found

    def reload(self) -> bool:
        """Re-reads the file; True when the new keys are in use, False (old keys kept, error logged) else."""
        with self._lock:
            return self._reload_locked()

    def _reload_if_changed(self) -> None:
        if time.monotonic() - self._checked_at < self._interval_s:
            return
        with self._lock:
            self._checked_at = time.monotonic()
            try:
                changed = self._stat_signature() != self._signature
            except OSError:  # removed or unreadable: logged by the reload, the keys stay
                changed = True
            if changed:
                self._reload_locked()

    def _reload_locked(self) -> bool:
        try:
            signature = self._stat_signature()
            keys = self._read()
        except (OSError, InvalidArgumentError) as error:
            log.error("API keys file not reloaded, the %d keys in use are kept: %s", len(self._keys), error)
            return False
        self._signature, self._keys = signature, keys
        log.info("API keys reloaded from %s: %d keys", self.path, len(keys))
        return True

    def _stat_signature(self) -> tuple[int, int, int]:
        info = self.path.stat()
        return info.st_mtime_ns, info.st_size, info.st_ino

    def _read(self) -> tuple[ApiKey, ...]:
        info = self.path.stat()
        if info.st_mode & stat.S_IRWXO:
            raise InvalidArgumentError("api_keys_file", f"{self.path} is accessible to other users (mode "
                                                        f"{stat.filemode(info.st_mode)}); chmod o-rwx it")
        return parse_api_keys(self.path.read_text(), str(self.path))
