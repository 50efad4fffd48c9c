"""Opening a GGUF file and reading its metadata as typed values, with every parse failure as ModelLoadError.

The `gguf` package parses over a memory map and fails on truncated or corrupt files with bare numpy errors;
this module turns those into messages that name the file and say what is wrong with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType
from gguf.gguf_reader import ReaderField

from arbi_grpc.errors import ModelLoadError

GGUF_MAGIC = b"GGUF"
# Fixed header: magic (4) + version (4) + tensor count (8) + metadata count (8).
GGUF_HEADER_BYTES = 24

# What the gguf package raises while parsing a damaged file (numpy reshape/view errors, bad enum values,
# invalid UTF-8, out-of-range offsets, allocation of absurd sizes).
_PARSE_FAILURES = (ValueError, IndexError, KeyError, TypeError, OverflowError, UnicodeDecodeError, MemoryError)

_INTEGER_TYPES = frozenset(
    {
        GGUFValueType.UINT8,
        GGUFValueType.INT8,
        GGUFValueType.UINT16,
        GGUFValueType.INT16,
        GGUFValueType.UINT32,
        GGUFValueType.INT32,
        GGUFValueType.UINT64,
        GGUFValueType.INT64,
    }
)
_FLOAT_TYPES = frozenset({GGUFValueType.FLOAT32, GGUFValueType.FLOAT64})


def open_gguf(path: Path) -> GGUFReader:
    """Parse the header, metadata and tensor directory of `path`; tensor data stays memory-mapped."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            magic = handle.read(len(GGUF_MAGIC))
    except OSError as error:
        raise ModelLoadError(f"{path}: cannot read GGUF file ({error.strerror or error})") from error
    if size < GGUF_HEADER_BYTES:
        raise ModelLoadError(f"{path}: truncated GGUF file ({size} bytes, the header alone is {GGUF_HEADER_BYTES})")
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"{path}: not a GGUF file (starts with {magic!r}, expected {GGUF_MAGIC!r})")
    try:
        return GGUFReader(path)
    except _PARSE_FAILURES as error:
        raise ModelLoadError(f"{path}: truncated or corrupt GGUF file ({size} bytes): {error}") from error


@dataclass(frozen=True)
class GgufMetadata:
    """Typed, validated access to the key/value metadata of one parsed GGUF file."""

    path: Path
    fields: dict[str, ReaderField]

    @classmethod
    def of(cls, path: Path, reader: GGUFReader) -> GgufMetadata:
        return cls(path=path, fields=dict(reader.fields))

    def has(self, key: str) -> bool:
        return key in self.fields

    def string(self, key: str, default: str | None = None) -> str:
        return self._scalar(key, frozenset({GGUFValueType.STRING}), "a string", default)

    def integer(self, key: str, default: int | None = None) -> int:
        return int(self._scalar(key, _INTEGER_TYPES, "an integer", default))

    def number(self, key: str, default: float | None = None) -> float:
        value = self._scalar(key, _FLOAT_TYPES | _INTEGER_TYPES, "a number", default)
        field = self.fields.get(key)
        if field is not None and field.types == [GGUFValueType.FLOAT32]:
            # The shortest decimal that reads back as the same float32 (1e-05, not 9.999999747378752e-06).
            return float(str(np.float32(value)))
        return float(value)

    def boolean(self, key: str, default: bool | None = None) -> bool:
        return bool(self._scalar(key, frozenset({GGUFValueType.BOOL}), "a boolean", default))

    def optional_integer(self, key: str) -> int | None:
        return self.integer(key) if self.has(key) else None

    def string_list(self, key: str) -> list[str]:
        return self._array(key, frozenset({GGUFValueType.STRING}), "an array of strings")

    def integer_list(self, key: str) -> list[int]:
        return [int(value) for value in self._array(key, _INTEGER_TYPES, "an array of integers")]

    def keys_with_prefix(self, prefix: str) -> list[str]:
        return [key for key in self.fields if key.startswith(prefix)]

    def _field(self, key: str) -> ReaderField:
        field = self.fields.get(key)
        if field is None:
            raise ModelLoadError(f"{self.path}: GGUF metadata key {key!r} is missing")
        return field

    def _scalar(self, key: str, accepted: frozenset[GGUFValueType], what: str, default: Any) -> Any:
        if default is not None and key not in self.fields:
            return default
        field = self._field(key)
        if len(field.types) != 1 or field.types[0] not in accepted:
            raise ModelLoadError(f"{self.path}: GGUF metadata {key!r} should be {what}, found {_type_name(field)}")
        return self._contents(key, field)

    def _array(self, key: str, accepted: frozenset[GGUFValueType], what: str) -> list[Any]:
        field = self._field(key)
        if len(field.types) != 2 or field.types[0] != GGUFValueType.ARRAY or field.types[1] not in accepted:
            raise ModelLoadError(f"{self.path}: GGUF metadata {key!r} should be {what}, found {_type_name(field)}")
        return list(self._contents(key, field))

    def _contents(self, key: str, field: ReaderField) -> Any:
        try:
            return field.contents()
        except _PARSE_FAILURES as error:
            raise ModelLoadError(f"{self.path}: GGUF metadata {key!r} is corrupt: {error}") from error


def _type_name(field: ReaderField) -> str:
    return "/".join(value_type.name.lower() for value_type in field.types) or "nothing"
