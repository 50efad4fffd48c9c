"""Reading an HF-style model directory: `config.json` and safetensors weights (one file, or shards listed in
`model.safetensors.index.json`), and a GGUF import's block-quantized weights. Every file problem becomes a
ModelLoadError naming the file and tensor.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from arbi_grpc.errors import ModelLoadError
from arbi_grpc.models.int8_weights import Int8Weight
from arbi_grpc.models.quantized_weights import QuantizedWeight, from_stored, stored_base_name

CONFIG_FILE = "config.json"
SAFETENSORS_INDEX_FILE = "model.safetensors.index.json"


def read_hf_config(model_dir: Path) -> dict[str, Any]:
    """The parsed `config.json` of `model_dir`."""
    return _read_json_object(model_dir / CONFIG_FILE)


def read_checkpoint_tensors(
    model_dir: Path,
    *,
    expected_shapes: Mapping[str, tuple[int, ...]],
    is_ignored: Callable[[str], bool],
    dtype: torch.dtype,
    device: torch.device | str,
    select: Callable[[str, Tensor], Tensor] | None = None,
    quantize: Callable[[str, Tensor], Int8Weight | None] | None = None,
) -> dict[str, Tensor | Int8Weight]:
    """Every tensor of `expected_shapes`, checked (shape, finite values), converted to `dtype` on `device`;
    `select(name, tensor)`, when given, picks the part kept (a tensor-parallel rank's shard) before the copy;
    `quantize(name, tensor)`, when given, may return a quantized form of the checked tensor (in its stored
    dtype) to keep instead of the `dtype` copy, one tensor at a time (None: the copy is kept).

    Tensors for which `is_ignored(name)` holds are skipped; any other tensor not in `expected_shapes`,
    and any expected tensor absent from all files, is an error.
    """
    files, indexed_names = _weight_files(model_dir)
    tensors: dict[str, Tensor] = {}
    found_in: dict[str, Path] = {}
    for path in files:
        with _open_safetensors(path) as handle:
            for name in handle.keys():
                if name in found_in:
                    raise ModelLoadError(f"{path}: tensor {name!r} is also stored in {found_in[name]}")
                found_in[name] = path
                if is_ignored(name):
                    continue
                if name not in expected_shapes:
                    raise ModelLoadError(f"{path}: unexpected tensor {name!r} for this architecture")
                tensors[name] = _checked_tensor(handle, path, name, expected_shapes[name], dtype, device, select,
                                                quantize)
    for name, path in indexed_names.items():
        if found_in.get(name) != path:
            raise ModelLoadError(f"{model_dir / SAFETENSORS_INDEX_FILE}: tensor {name!r} is not in {path.name}")
    missing = sorted(set(expected_shapes) - set(tensors))
    if missing:
        shown = ", ".join(repr(name) for name in missing[:5]) + (" ..." if len(missing) > 5 else "")
        listed = ", ".join(path.name for path in files)
        raise ModelLoadError(f"{model_dir}: missing tensor(s) {shown} (searched {listed})")
    return tensors


def read_quantized_tensors(path: Path, expected_shapes: Mapping[str, tuple[int, ...]]) -> dict[str, QuantizedWeight]:
    """The block-quantized weights stored in `path` (`models/quantized_weights.py`'s layout), by checkpoint name;
    every one must be a tensor of `expected_shapes`."""
    parts: dict[str, dict[str, Tensor]] = {}
    with _open_safetensors(path) as handle:
        for stored_name in handle.keys():
            name = stored_base_name(stored_name)
            if name is None or name not in expected_shapes:
                raise ModelLoadError(f"{path}: unexpected quantized tensor {stored_name!r} for this architecture")
            try:
                parts.setdefault(name, {})[stored_name[len(name):]] = handle.get_tensor(stored_name)
            except (SafetensorError, OSError, RuntimeError, ValueError) as error:
                raise ModelLoadError(f"{path}: cannot read tensor {stored_name!r} ({error})") from None
    return {name: from_stored(name, found, expected_shapes[name], str(path)) for name, found in parts.items()}


def _weight_files(model_dir: Path) -> tuple[list[Path], dict[str, Path]]:
    """The safetensors files to read, and (when sharded) which file the index promises for each tensor."""
    index_path = model_dir / SAFETENSORS_INDEX_FILE
    if not index_path.is_file():
        files = sorted(model_dir.glob("*.safetensors"))
        if not files:
            raise ModelLoadError(f"{model_dir}: no *.safetensors weight file")
        return files, {}
    weight_map = _read_json_object(index_path).get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(value, str) for value in weight_map.values()):
        raise ModelLoadError(f"{index_path}: weight_map must map tensor names to file names")
    indexed_names = {name: model_dir / file_name for name, file_name in weight_map.items()}
    files = sorted(set(indexed_names.values()))
    for path in files:
        if not path.is_file():
            raise ModelLoadError(f"{index_path}: shard {path.name} does not exist")
    return files, indexed_names


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        parsed = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelLoadError(f"{path}: file is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"{path}: unreadable or invalid JSON ({error})") from None
    if not isinstance(parsed, dict):
        raise ModelLoadError(f"{path}: expected a JSON object, got {type(parsed).__name__}")
    return parsed


def _open_safetensors(path: Path) -> Any:
    try:
        return safe_open(str(path), framework="pt", device="cpu")
    except (SafetensorError, OSError) as error:
        raise ModelLoadError(f"{path}: truncated or corrupt safetensors file ({error})") from None


def _checked_tensor(
    handle: Any,
    path: Path,
    name: str,
    expected_shape: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device | str,
    select: Callable[[str, Tensor], Tensor] | None,
    quantize: Callable[[str, Tensor], Int8Weight | None] | None,
) -> Tensor | Int8Weight:
    try:
        stored = handle.get_tensor(name)
    except (SafetensorError, OSError, RuntimeError, ValueError) as error:
        raise ModelLoadError(f"{path}: cannot read tensor {name!r} ({error})") from None
    if tuple(stored.shape) != expected_shape:
        raise ModelLoadError(
            f"{path}: tensor {name!r} has shape {list(stored.shape)}, the config implies {list(expected_shape)}"
        )
    if not stored.is_floating_point():
        raise ModelLoadError(f"{path}: tensor {name!r} has dtype {stored.dtype}; only float weights are supported")
    if select is not None:
        stored = select(name, stored)
    on_device = stored.to(device, copy=True)  # owns its memory: never a view of the file's mapping
    # Any NaN or infinity makes the sum non-finite (a single reduction is far cheaper than isfinite().all()).
    if not bool(torch.isfinite(on_device.sum(dtype=torch.float32))):
        raise ModelLoadError(f"{path}: tensor {name!r} contains NaN or infinite values (corrupt file?)")
    quantized = quantize(name, on_device) if quantize is not None else None
    return on_device.to(dtype) if quantized is None else quantized
