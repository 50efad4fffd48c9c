"""Compiled grammars kept for reuse: the most recently used in memory (LRU by count), every one on disk.

Keyed by a constraint's `cache_key` within one vocabulary's fingerprint. On disk a grammar is xgrammar's
`CompiledGrammar.serialize_json` in `<root>/<fingerprint>/<sha256 of the key>.json`, written atomically; a
file that does not deserialize (another xgrammar format, a torn write) counts as a miss and is replaced.
Thread-safe: the compile pool and the request threads share it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

import xgrammar as xgr

log = logging.getLogger(__name__)

DEFAULT_MEMORY_ENTRIES = 256


class CompileCache:
    """Compiled grammars of one vocabulary; `directory` None keeps them in memory only."""

    def __init__(self, info: xgr.TokenizerInfo, directory: Path | None,
                 memory_entries: int = DEFAULT_MEMORY_ENTRIES) -> None:
        self._info = info
        self._directory = directory
        self._memory_entries = memory_entries
        self._memory: OrderedDict[str, xgr.CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[xgr.CompiledGrammar, str] | None:
        """(grammar, "memory" or "disk") for a cached key, else None."""
        with self._lock:
            grammar = self._memory.get(key)
            if grammar is not None:
                self._memory.move_to_end(key)
                return grammar, "memory"
        grammar = self._read(key)
        if grammar is None:
            return None
        self._remember(key, grammar)
        return grammar, "disk"

    def put(self, key: str, grammar: xgr.CompiledGrammar) -> None:
        self._remember(key, grammar)
        self._write(key, grammar)

    def _remember(self, key: str, grammar: xgr.CompiledGrammar) -> None:
        with self._lock:
            self._memory[key] = grammar
            self._memory.move_to_end(key)
            while len(self._memory) > self._memory_entries:
                self._memory.popitem(last=False)

    def _path(self, key: str) -> Path | None:
        if self._directory is None:
            return None
        return self._directory / f"{hashlib.sha256(key.encode()).hexdigest()}.json"

    def _read(self, key: str) -> xgr.CompiledGrammar | None:
        path = self._path(key)
        if path is None or not path.is_file():
            return None
        try:
            return xgr.CompiledGrammar.deserialize_json(path.read_text(encoding="utf-8"), self._info)
        except (OSError, UnicodeDecodeError, RuntimeError, ValueError) as error:
            log.warning("ignoring the cached grammar %s: %s", path.name, error)
            return None

    def _write(self, key: str, grammar: xgr.CompiledGrammar) -> None:
        path = self._path(key)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False,
                                             encoding="utf-8") as file:
                file.write(grammar.serialize_json())
            os.replace(file.name, path)
        except OSError as error:  # a full or read-only disk costs later compiles, not this request
            log.warning("could not write the compiled grammar %s: %s", path, error)
