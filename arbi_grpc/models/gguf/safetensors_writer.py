"""Streaming writer for float32 `.safetensors` files: the header first, then each tensor as it is produced.

The header needs only names and shapes, so an importer can dequantize one tensor at a time and peak memory
stays at the largest tensor instead of the whole model.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

_FLOAT32_BYTES = 4
# safetensors pads the JSON header with spaces so tensor data starts 8-byte aligned.
_HEADER_ALIGNMENT = 8


@dataclass(frozen=True)
class TensorEntry:
    """Name and shape of one float32 tensor in the file, in write order."""

    name: str
    shape: tuple[int, ...]

    @property
    def num_bytes(self) -> int:
        return math.prod(self.shape) * _FLOAT32_BYTES


def safetensors_header(entries: Sequence[TensorEntry], metadata: Mapping[str, str]) -> bytes:
    """The length-prefixed, padded JSON header for `entries` laid out back to back."""
    header: dict[str, object] = {"__metadata__": dict(metadata)}
    offset = 0
    for entry in entries:
        header[entry.name] = {
            "dtype": "F32",
            "shape": list(entry.shape),
            "data_offsets": [offset, offset + entry.num_bytes],
        }
        offset += entry.num_bytes
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % _HEADER_ALIGNMENT)
    return struct.pack("<Q", len(encoded)) + encoded


def write_safetensors(
    path: Path, entries: Sequence[TensorEntry], arrays: Iterable[np.ndarray], metadata: Mapping[str, str]
) -> None:
    """Write `arrays` (one per entry, same order and shape) to `path` and fsync it."""
    with path.open("wb") as handle:
        handle.write(safetensors_header(entries, metadata))
        written = 0
        for entry, array in zip(entries, arrays):
            if array.shape != entry.shape or array.dtype != np.float32:
                raise ValueError(
                    f"tensor {entry.name}: produced {array.dtype}{list(array.shape)}, "
                    f"the header says float32{list(entry.shape)}"
                )
            handle.write(np.ascontiguousarray(array, dtype="<f4").data)
            written += 1
        if written != len(entries):
            raise ValueError(f"{path}: {written} tensors produced for {len(entries)} header entries")
        handle.flush()
        os.fsync(handle.fileno())
