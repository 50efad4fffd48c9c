"""`arbi-serve serve` as a child process on a free loopback port, for the benchmarks that drive a real server."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from arbi_client.readiness import wait_until_serving


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_serve(flags: list[str], log_path: Path, timeout_s: float = 600) -> tuple[subprocess.Popen, str]:
    """Boots `arbi-serve serve --port P *flags` with its output appended to `log_path`; returns the process and
    its target once its health check says SERVING. Raises RuntimeError (with the log's end) when it does not."""
    port = free_port()
    command = [sys.executable, "-m", "arbi_grpc", "serve", "--host", "127.0.0.1", "--port", str(port), *flags]
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
    target = f"127.0.0.1:{port}"
    if not wait_until_serving(target, timeout_s, lambda: process.poll() is None):
        process.kill()
        raise RuntimeError(f"the server did not become ready:\n{log_path.read_text(errors='replace')[-4000:]}")
    return process, target
