"""Runs the real `promtool check metrics` (apt `prometheus`, installed by tests/setup.sh)."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def check_metrics(exposition: bytes) -> subprocess.CompletedProcess:
    """Lints an exposition with promtool; fails the test when promtool is missing or finds a problem."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: run `bash tests/setup.sh` (apt-get install prometheus)")
    result = subprocess.run([promtool, "check", "metrics"], check=False, input=exposition, capture_output=True,
                            timeout=60)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()
    return result
