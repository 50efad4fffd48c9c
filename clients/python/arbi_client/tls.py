"""Channels to a server with or without TLS: `ChannelTls` names the CA that signed the server's certificate
and, for a server that requires client certificates (mTLS), the client's certificate and key.

`open_channel` / `open_aio_channel` give a plaintext channel when no CA is named, so every caller (client,
readiness probes, the gateway's upstream, `arbi-serve chat`) opens its channel the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc


@dataclass(frozen=True)
class ChannelTls:
    """PEM files; all empty means plaintext. A client certificate needs its key, and both need a CA."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("a client certificate and its key go together: set both cert_file and key_file")
        if self.cert_file and not self.ca_file:
            raise ValueError("a client certificate is sent over TLS only: set ca_file too")

    @property
    def enabled(self) -> bool:
        return bool(self.ca_file)

    def credentials(self) -> grpc.ChannelCredentials:
        """Credentials that trust `ca_file` and present the client certificate when one is set."""
        return grpc.ssl_channel_credentials(root_certificates=_read_pem(self.ca_file),
                                            private_key=_read_pem(self.key_file),
                                            certificate_chain=_read_pem(self.cert_file))


def _read_pem(name: str) -> bytes | None:
    return Path(name).expanduser().read_bytes() if name else None


PLAINTEXT = ChannelTls()


def open_channel(target: str, tls: ChannelTls = PLAINTEXT,
                 options: Sequence[tuple[str, object]] = ()) -> grpc.Channel:
    if tls.enabled:
        return grpc.secure_channel(target, tls.credentials(), options=list(options))
    return grpc.insecure_channel(target, options=list(options))


def open_aio_channel(target: str, tls: ChannelTls = PLAINTEXT,
                     options: Sequence[tuple[str, object]] = ()) -> grpc.aio.Channel:
    if tls.enabled:
        return grpc.aio.secure_channel(target, tls.credentials(), options=list(options))
    return grpc.aio.insecure_channel(target, options=list(options))
