"""The model fingerprint a TKV calibration bundle is tied to, so scales calibrated for one model are refused
for another.

Definition (version tkvfp1): SHA-256 over (1) config.json as canonical JSON (sorted keys, compact separators),
without `transformers_version` and keys starting with "_" (tool bookkeeping, not the model); (2) the sorted
list of every weight tensor's name, dtype and shape; (3) for the first 4 tensors by sorted name, the first 64
values of their first row, as fp32. Re-saving the same weights in another dtype changes the fingerprint.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from arbi_grpc.errors import ModelLoadError

FINGERPRINT_VERSION = "tkvfp1"
PROBED_TENSORS = 4
PROBED_VALUES = 64
_IGNORED_CONFIG_KEYS = frozenset({"transformers_version"})


def _canonical_config(config: Mapping[str, Any]) -> bytes:
    kept = {k: v for k, v in config.items() if k not in _IGNORED_CONFIG_KEYS and not k.startswith("_")}
    return json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str).encode()


def _probe_values(first_row: torch.Tensor) -> bytes:
    return first_row.reshape(-1)[:PROBED_VALUES].to(torch.float32).contiguous().numpy().tobytes()


def _digest(
    config: Mapping[str, Any],
    layout: Mapping[str, tuple[str, tuple[int, ...]]],
    probes: Mapping[str, torch.Tensor],
) -> str:
    hasher = hashlib.sha256(_canonical_config(config))
    for name in sorted(layout):
        dtype, shape = layout[name]
        hasher.update(f"|{name}|{dtype}|{list(shape)}".encode())
    for name in sorted(probes):
        hasher.update(name.encode() + _probe_values(probes[name]))
    return f"{FINGERPRINT_VERSION}:{hasher.hexdigest()[:32]}"


def _first_row(tensor: torch.Tensor) -> torch.Tensor:
    return tensor[0] if tensor.dim() else tensor


def model_fingerprint(config: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> str:
    """Fingerprint of a model given its parsed config.json and its weights by name (a state dict)."""
    layout = {name: (str(t.dtype), tuple(t.shape)) for name, t in tensors.items()}
    probed_names = sorted(tensors)[:PROBED_TENSORS]
    return _digest(config, layout, {name: _first_row(tensors[name].detach().cpu()) for name in probed_names})


def model_dir_fingerprint(model_dir: Path) -> str:
    """Fingerprint of an HF-style model directory (config.json + *.safetensors), read lazily."""
    from safetensors import SafetensorError, safe_open

    config_path = Path(model_dir) / "config.json"
    weight_paths = sorted(Path(model_dir).glob("*.safetensors"))
    try:
        config = json.loads(config_path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"{config_path}: cannot read config.json ({error})") from error
    if not weight_paths:
        raise ModelLoadError(f"{model_dir}: no *.safetensors weight files")
    layout: dict[str, tuple[str, tuple[int, ...]]] = {}
    owners: dict[str, Path] = {}
    try:
        for path in weight_paths:
            with safe_open(str(path), framework="pt") as handle:
                for name in handle.keys():
                    first = handle.get_slice(name)
                    shape = tuple(first.get_shape())
                    row = first[0:1] if shape else first[...]
                    layout[name] = (str(row.dtype), shape)
                    owners[name] = path
        probes = {}
        for name in sorted(layout)[:PROBED_TENSORS]:
            with safe_open(str(owners[name]), framework="pt") as handle:
                sliced = handle.get_slice(name)
                probes[name] = sliced[0:1][0] if layout[name][1] else sliced[...]
    except (OSError, RuntimeError, ValueError, SafetensorError) as error:
        raise ModelLoadError(f"{model_dir}: cannot read safetensors weights ({error})") from error
    return _digest(config, layout, probes)
