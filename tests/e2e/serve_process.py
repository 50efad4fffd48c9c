"""Runs `arbi-serve serve` as a real subprocess on free 127.0.0.1 ports, for the operator and metrics tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from arbi_grpc.chat_client import wait_until_serving

CLI = [sys.executable, "-m", "arbi_grpc"]
BOOT_TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], check=False, capture_output=True, text=True, timeout=timeout,
                          env=env if env is not None else os.environ.copy())


@dataclass
class ServeProcess:
    """A `serve` process whose stdout and stderr go to `log_path` (never a pipe nobody reads)."""

    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_serve(model_dir: Path, log_path: Path, *flags: str, env: dict[str, str] | None = None,
                port: int | None = None) -> ServeProcess:
    """Boots a server on `port` (default: a free one) and waits until it answers SERVING; fails the test with
    its log if not."""
    port = port or free_port()
    # The metrics endpoint's default port is fixed: servers of a test run open none unless a test asks.
    metrics = () if any(flag.startswith("--metrics-port") for flag in flags) else ("--metrics-port", "0")
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            [*CLI, "serve", "--model", str(model_dir), "--port", str(port), *metrics, *flags],
            stdout=log_file, stderr=subprocess.STDOUT, env=env if env is not None else os.environ.copy(),
        )
    served = ServeProcess(process, port, log_path)
    if not wait_until_serving(served.target, BOOT_TIMEOUT_S, lambda: process.poll() is None):
        served.stop()
        pytest.fail(f"the server did not start:\n{served.log()}")
    return served
