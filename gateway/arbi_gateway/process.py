"""Runs the gateway as a child process (`python -m arbi_gateway`): `arbi-serve run` starts one beside
the server, the tests and the overhead benchmark start their own. The child logs to a file; its address is
read from the line it prints once its socket listens, and it is ready when GET /health answers.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

_LISTENING = re.compile(r"arbi-gateway listening on (http://\S+)")
_POLL_S = 0.05


class GatewayProcess:
    """A running gateway: its process and base URL (`http://host:port`)."""

    def __init__(self, process: subprocess.Popen, url: str, log_path: Path) -> None:
        self.process = process
        self.url = url
        self.log_path = log_path

    @classmethod
    def spawn(cls, args: Sequence[str], log_path: Path, *, env: Mapping[str, str] | None = None,
              detach: bool = False, timeout_s: float = 60.0) -> GatewayProcess:
        """Starts `arbi-gateway ARGS`, waits until it answers GET /health; raises RuntimeError if it
        exits or does not answer within `timeout_s`. `detach` starts it in a session of its own, so it
        outlives the caller."""
        offset = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "ab") as log_file:
            process = subprocess.Popen([sys.executable, "-m", "arbi_gateway", *args], stdout=log_file,
                                       stderr=subprocess.STDOUT, env=None if env is None else dict(env),
                                       start_new_session=detach)
        deadline = time.monotonic() + timeout_s
        url = None
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"arbi-gateway exited with status {process.returncode}:\n"
                                   + _tail(log_path, offset))
            if url is None:
                match = _LISTENING.search(_tail(log_path, offset))
                url = match.group(1) if match else None
            if url is not None and _answers(url + "/health"):
                return cls(process, url, log_path)
            time.sleep(_POLL_S)
        process.kill()
        process.wait()
        raise RuntimeError(f"arbi-gateway did not answer within {timeout_s:.0f} s:\n" + _tail(log_path, offset))

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stops the gateway (SIGTERM, then SIGKILL after `timeout_s`)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def gateway_upstream(url: str) -> str | None:
    """The upstream of the gateway answering GET /health at `url`, or None when none answers."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=2) as response:
            return json.loads(response.read()).get("upstream")
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return None


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _tail(log_path: Path, offset: int) -> str:
    with open(log_path, "rb") as log_file:
        log_file.seek(offset)
        return log_file.read().decode(errors="replace")[-4000:]

