"""Reads a model's architecture for `plan` without loading weights or importing a GGUF into the cache:
`config.json` of an HF-style directory (weights need not be there; an earlier import in the cache is one too),
a GGUF file's metadata, or a real model's shape by name (`models/reference_shapes.py`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from arbi_grpc.errors import ModelLoadError, NotFoundError
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.gguf.config import SpecialTokenIds, architecture_of, hf_config, read_dimensions
from arbi_grpc.models.gguf.file import GgufMetadata, open_gguf
from arbi_grpc.models.gguf.tensors import OUTPUT_TENSOR, embedding_rows, plan_tensors
from arbi_grpc.models.model_cache import EMBEDDED_MODELS, resolve_model
from arbi_grpc.models.quantized_layout import GGUF_KINDS, with_stored_quantization
from arbi_grpc.models.reference_shapes import model_config_for_shape


@dataclass(frozen=True)
class ModelSource:
    """A model's name, its decoder config, and where that config was read from (a file, or a shape's name)."""

    name: str
    config: ModelConfig
    read_from: str


def read_model_source(spec: str) -> ModelSource:
    """The config of `spec` (a known name, an HF-style directory, a .gguf file, or a cached import's name)."""
    for embedded in EMBEDDED_MODELS:
        if embedded.name == spec:
            gguf = _embedded_gguf(embedded.package, embedded.file_name, spec)
            return ModelSource(spec, _gguf_config(gguf), str(gguf))
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return ModelSource(path.stem, _gguf_config(path), str(path))
    resolved = resolve_model(spec)  # a directory or an earlier import: nothing is imported here
    config_path = resolved.directory / "config.json"
    try:
        hf = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"{config_path}: cannot read the model config ({error})") from error
    config = with_stored_quantization(ModelConfig.from_hf_config(hf), resolved.directory)
    return ModelSource(resolved.name, config, str(config_path))


def reference_model_source(shape: str) -> ModelSource:
    """The config of a real model's shape ("llama3-8b", "qwen3-0.6b", ...), with no file at all."""
    return ModelSource(shape, model_config_for_shape(shape), f"reference shape {shape}")


def _embedded_gguf(package: str, file_name: str, name: str) -> Path:
    found = importlib.util.find_spec(package)  # locates the package without executing it
    if found is None or not found.submodule_search_locations:
        raise NotFoundError(f"model {name!r} ships in the Python package of module {package}, which is not installed")
    return Path(next(iter(found.submodule_search_locations))) / file_name


def _gguf_config(path: Path) -> ModelConfig:
    """The config the GGUF import would write, from the file's metadata and tensor list (no tensor data)."""
    reader = open_gguf(path)
    metadata = GgufMetadata.of(path, reader)
    spec = architecture_of(metadata)
    dimensions = read_dimensions(metadata, spec, vocab_size=embedding_rows(path, reader.tensors))
    names = {tensor.name for tensor in reader.tensors}
    attention_bias = spec.gguf_name == "llama" and "blk.0.attn_q.bias" in names
    config = hf_config(
        spec, dimensions, SpecialTokenIds(bos=None, eos=None, pad=None),
        tie_word_embeddings=OUTPUT_TENSOR not in names, attention_bias=attention_bias,
    )
    kept = {plan.hf_name: GGUF_KINDS[plan.source.tensor_type.name]  # what the import keeps quantized
            for plan in plan_tensors(path, reader.tensors, spec, dimensions, attention_bias)
            if plan.source.tensor_type.name in GGUF_KINDS and len(plan.hf_shape) == 2}
    return dataclasses.replace(ModelConfig.from_hf_config(config), quantized_matrices=tuple(sorted(kept.items())))
