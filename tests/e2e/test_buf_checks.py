"""The protos pass buf's checks: lint (STANDARD), formatting, and no breaking change against the previous
commit (FILE rules), as configured in buf.yaml. CI runs these through pytest."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _buf(*args: str) -> subprocess.CompletedProcess:
    binary = shutil.which("buf")
    if binary is None:
        pytest.fail("buf is not installed; run `bash tests/setup.sh` (npm install -g @bufbuild/buf)")
    return subprocess.run([binary, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_buf_lint() -> None:
    linted = _buf("lint")
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_buf_format() -> None:
    formatted = _buf("format", "--diff", "--exit-code")
    assert formatted.returncode == 0, "run `buf format -w`:\n" + formatted.stdout + formatted.stderr


def test_buf_breaking_against_the_previous_commit() -> None:
    previous = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "HEAD~1^{commit}"], cwd=ROOT,
                              capture_output=True, text=True)
    if previous.returncode != 0:
        pytest.fail("buf breaking compares with the previous commit (HEAD~1), which this checkout lacks; "
                    "clone with history (git fetch --deepen=1)")
    checked = _buf("breaking", "--against", ".git#ref=HEAD~1")
    assert checked.returncode == 0, checked.stdout + checked.stderr
