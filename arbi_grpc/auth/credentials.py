"""The bearer credentials the server accepts: the admin token, an optional generate token, the API keys
of an optional keys file (each with its tenant), and the batch runner's in-process token.

The admin token is configured, or read from a file that only its owner may read, or minted into such a
file (mode 0600, written whole and then linked into place, so that servers booting together on one cache
agree on one token) on first boot. The in-process token is minted at every boot and never
written. Presented tokens are compared in constant time.
"""

from __future__ import annotations

import enum
import hmac
import logging
import os
import secrets
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from arbi_grpc.auth.api_keys import ApiKeys
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.server_config import ADMIN_TOKEN_FILE_NAME, ServerConfig

log = logging.getLogger(__name__)

_MINTED_TOKEN_BYTES = 32


class Role(enum.Enum):
    """What a presented credential allows."""

    GENERATE = "generate"
    ADMIN = "admin"


@dataclass(frozen=True)
class Caller:
    """What a presented credential allows, and the tenant it fixes (None: the request's own field)."""

    role: Role
    tenant: str | None = None


@dataclass(frozen=True)
class Credentials:
    """The tokens to accept; without a generate token or API keys, GenerateService is open."""

    admin_token: str = field(repr=False)
    generate_token: str = field(repr=False)
    admin_token_path: Path | None = None  # where the admin token was read or minted
    api_keys: ApiKeys | None = None
    internal_token: str = field(default_factory=lambda: secrets.token_urlsafe(_MINTED_TOKEN_BYTES), repr=False)

    @property
    def generate_guarded(self) -> bool:
        """Whether GenerateService and the data services need a credential."""
        return bool(self.generate_token) or self.api_keys is not None

    def caller_of(self, token: str) -> Caller | None:
        """Who `token` is, or None; each comparison takes constant time."""
        presented = token.encode()
        if hmac.compare_digest(presented, self.admin_token.encode()):
            return Caller(Role.ADMIN)
        if self.generate_token and hmac.compare_digest(presented, self.generate_token.encode()):
            return Caller(Role.GENERATE)
        if hmac.compare_digest(presented, self.internal_token.encode()):
            return Caller(Role.GENERATE)
        key = self.api_keys.find(token) if self.api_keys is not None else None
        if key is not None:
            return Caller(Role.ADMIN if key.admin else Role.GENERATE, key.tenant)
        return None

    def role_of(self, token: str) -> Role | None:
        """The role `token` grants, or None."""
        caller = self.caller_of(token)
        return None if caller is None else caller.role


def load_credentials(config: ServerConfig, cache_dir: Path) -> Credentials:
    """The configured tokens; the admin token comes from `config`, else its file (minted when missing)."""
    api_keys = ApiKeys(Path(config.api_keys_file).expanduser()) if config.api_keys_file else None
    if config.admin_token:
        return Credentials(config.admin_token, config.generate_token, api_keys=api_keys)
    path = (Path(config.admin_token_file).expanduser() if config.admin_token_file
            else cache_dir / ADMIN_TOKEN_FILE_NAME)
    token = _read_token_file(path) if path.exists() else _mint_token_file(path)
    if token == config.generate_token:
        raise InvalidArgumentError("generate_token", f"must differ from the admin token in {path}")
    return Credentials(token, config.generate_token, path, api_keys)


def _read_token_file(path: Path) -> str:
    info = path.stat()
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidArgumentError(
            "admin_token_file", f"{path} is accessible to other users (mode {stat.filemode(info.st_mode)}); "
            "make it readable by its owner only (chmod 600)"
        )
    if info.st_uid != os.geteuid():
        raise InvalidArgumentError("admin_token_file", f"{path} belongs to another user (uid {info.st_uid})")
    token = path.read_text().strip()
    if len(token) < 16:
        raise InvalidArgumentError("admin_token_file", f"{path} holds no token of at least 16 characters")
    return token


def _mint_token_file(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_urlsafe(_MINTED_TOKEN_BYTES)
    # Written whole under a private name (mode 0600), then linked into place, which fails if the file exists:
    # a server booting beside this one on the same cache sees no file or the whole token, never an empty one.
    descriptor, draft = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(token + "\n")
        os.link(draft, path)
    except FileExistsError:  # another server minted it first
        return _read_token_file(path)
    finally:
        os.unlink(draft)
    log.info("minted the admin token into %s (readable by its owner only)", path)
    return token
