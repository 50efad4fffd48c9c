"""Where arbi-serve keeps its state: `$ARBI_CACHE_DIR` (default `~/.cache/arbi-serve`), with `run/` holding
the pid and log files of what `arbi-serve run` starts (`server-<port>.pid`, `gateway-<port>.pid`, and their
`.log` files).
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_ENV = "ARBI_CACHE_DIR"


def arbi_home() -> Path:
    configured = os.environ.get(CACHE_DIR_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "arbi-serve"


def run_state_dir() -> Path:
    return arbi_home() / "run"
