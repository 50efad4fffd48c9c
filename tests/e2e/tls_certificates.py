"""A throwaway certificate authority for the TLS tests, made at test time with the `openssl` program: a CA,
a server certificate for 127.0.0.1 and localhost, and a client certificate, all signed by the CA."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

_DAYS = "2"


@dataclass(frozen=True)
class CertificateFiles:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _signed(directory: Path, name: str, subject: str, extensions: str) -> None:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", subject, cwd=directory)
    (directory / f"{name}.ext").write_text(extensions)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", _DAYS, "-out", f"{name}.pem", "-extfile", f"{name}.ext", cwd=directory)


def make_certificates(directory: Path) -> CertificateFiles:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl program is not installed (tests/setup.sh installs it)")
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", _DAYS, "-subj", "/CN=arbi-serve test CA", cwd=directory)
    _signed(directory, "server", "/CN=localhost",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _signed(directory, "client", "/CN=arbi-serve test client", "extendedKeyUsage=clientAuth\n")
    return CertificateFiles(directory / "ca.pem", directory / "server.pem", directory / "server.key",
                            directory / "client.pem", directory / "client.key")
