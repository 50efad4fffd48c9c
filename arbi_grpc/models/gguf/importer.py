"""Import of a GGUF file into the HF-style model directory the engine loads, written atomically.

The output holds config.json, model.safetensors (float32), quantized/model.safetensors (the Q4_0/Q4_1/Q8_0
matrices in their block quantization, when there are any: `models/quantized_weights.py`), tokenizer.json,
tokenizer_config.json, generation_config.json, arbi_import.json (where it came from) and, when the GGUF has
named chat templates, additional_chat_templates/<name>.jinja. Everything is validated before writing; files go to a temporary
directory beside `out_dir` that is renamed into place only when complete.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from arbi_grpc.errors import InvalidArgumentError, ModelLoadError
from arbi_grpc.models.gguf.config import architecture_of, hf_config, read_dimensions
from arbi_grpc.models.gguf.file import GgufMetadata, open_gguf
from arbi_grpc.models.gguf.safetensors_writer import TensorEntry, write_safetensors
from arbi_grpc.models.gguf.tensors import OUTPUT_TENSOR, TensorPlan, embedding_rows, plan_tensors, read_tensor
from arbi_grpc.models.gguf.tokenizer import (
    build_tokenizer,
    generation_config,
    named_chat_templates,
    read_vocabulary,
    tokenizer_config,
)
from arbi_grpc.models.quantized_layout import QUANTIZED_WEIGHTS_FILE

PROVENANCE_FILE = "arbi_import.json"
# Hugging Face's place for named chat templates beside the default one (`<name>.jinja` files).
ADDITIONAL_TEMPLATES_DIR = "additional_chat_templates"
WEIGHTS_FILE = "model.safetensors"
# 2: the quantized weights file. A cache entry of another format is rebuilt.
_PROVENANCE_FORMAT = 2


@dataclass(frozen=True)
class ImportProvenance:
    """What an imported directory was made from; the model cache keys reuse on it."""

    source: str
    source_size: int
    source_mtime_ns: int
    architecture: str
    gguf_name: str | None

    def to_json(self) -> dict[str, Any]:
        return {"format": _PROVENANCE_FORMAT, **asdict(self)}

    @staticmethod
    def is_outdated(directory: Path) -> bool:
        """Whether `directory` holds provenance of another format (an import by an older version)."""
        try:
            raw = json.loads((directory / PROVENANCE_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(raw, dict) and raw.get("format") != _PROVENANCE_FORMAT

    @classmethod
    def read(cls, directory: Path) -> ImportProvenance | None:
        """The provenance of an imported directory; None when absent or unreadable (not made by us)."""
        try:
            raw = json.loads((directory / PROVENANCE_FILE).read_text(encoding="utf-8"))
            if raw.get("format") != _PROVENANCE_FORMAT:
                return None
            return cls(
                source=str(raw["source"]),
                source_size=int(raw["source_size"]),
                source_mtime_ns=int(raw["source_mtime_ns"]),
                architecture=str(raw["architecture"]),
                gguf_name=raw.get("gguf_name"),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None


def import_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Convert `gguf_path` into an HF-style directory at `out_dir`, which must not exist yet.

    Raises UnsupportedArchitectureError for architectures other than llama/qwen2/qwen3, ModelLoadError for
    truncated or corrupt files, NotImplementedError for GGUF features outside the import's scope, and
    InvalidArgumentError when `out_dir` exists (before or, after losing a race, at the final rename).
    """
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if out_dir.exists():
        raise InvalidArgumentError("out_dir", f"{out_dir} already exists; an import never overwrites")
    source_stat = _stat(gguf_path)
    reader = open_gguf(gguf_path)
    metadata = GgufMetadata.of(gguf_path, reader)
    spec = architecture_of(metadata)
    vocabulary = read_vocabulary(metadata)
    dims = read_dimensions(metadata, spec, vocab_size=embedding_rows(gguf_path, reader.tensors))
    if len(vocabulary.tokens) > dims.vocab_size:
        raise ModelLoadError(
            f"{gguf_path}: {len(vocabulary.tokens)} tokens but only {dims.vocab_size} embedding rows"
        )
    names = {tensor.name for tensor in reader.tensors}
    attention_bias = spec.gguf_name == "llama" and "blk.0.attn_q.bias" in names
    plans = plan_tensors(gguf_path, reader.tensors, spec, dims, attention_bias)
    tokenizer = build_tokenizer(vocabulary)
    tied = OUTPUT_TENSOR not in names
    documents: dict[str, Any] = {
        "config.json": hf_config(
            spec, dims, vocabulary.special_ids(), tie_word_embeddings=tied, attention_bias=attention_bias
        ),
        "tokenizer_config.json": tokenizer_config(vocabulary, metadata, dims.context_length),
        "generation_config.json": generation_config(vocabulary),
        PROVENANCE_FILE: ImportProvenance(
            source=str(gguf_path.resolve()),
            source_size=source_stat.st_size,
            source_mtime_ns=source_stat.st_mtime_ns,
            architecture=spec.gguf_name,
            gguf_name=metadata.string("general.name") if metadata.has("general.name") else None,
        ).to_json(),
    }

    extra_templates = named_chat_templates(metadata)

    def write_into(staging: Path) -> None:
        tokenizer.save(str(staging / "tokenizer.json"))
        for file_name, document in documents.items():
            (staging / file_name).write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", "utf-8")
        if extra_templates:
            template_dir = staging / ADDITIONAL_TEMPLATES_DIR
            template_dir.mkdir()
            for name, template in extra_templates.items():
                (template_dir / f"{_file_safe(name)}.jinja").write_text(template, "utf-8")
        _write_weights(gguf_path, staging / WEIGHTS_FILE, plans)
        _write_quantized_weights(gguf_path, staging / QUANTIZED_WEIGHTS_FILE, plans)

    _write_atomically(out_dir, write_into)


def _file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip(".") or "template"


def _stat(path: Path) -> os.stat_result:
    try:
        return path.stat()
    except OSError as error:
        raise ModelLoadError(f"{path}: cannot read GGUF file ({error.strerror or error})") from error


def _write_weights(gguf_path: Path, target: Path, plans: list[TensorPlan]) -> None:
    entries = [TensorEntry(plan.hf_name, plan.hf_shape) for plan in plans]
    arrays = (read_tensor(gguf_path, plan) for plan in plans)
    write_safetensors(target, entries, arrays, metadata={"format": "pt"})


def _write_quantized_weights(gguf_path: Path, target: Path, plans: list[TensorPlan]) -> None:
    # Imported here: they import torch, which `plan` (and the rest of a model-cache lookup) never loads.
    from safetensors.torch import save

    from arbi_grpc.models.gguf.quantized_tensors import keeps_quantized, read_quantized

    stored = {}
    for plan in plans:
        if keeps_quantized(plan):
            stored.update(read_quantized(gguf_path, plan).stored_tensors(plan.hf_name))
    if stored:
        target.parent.mkdir()
        with target.open("wb") as handle:
            handle.write(save(stored, metadata={"format": "pt"}))
            handle.flush()
            os.fsync(handle.fileno())


def _write_atomically(out_dir: Path, write_into: Callable[[Path], None]) -> None:
    """Run `write_into(staging)` on a fresh directory beside `out_dir`, then rename it to `out_dir`."""
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        # os.mkdir (not mkdtemp, which is private to the user) so the result gets the usual umask permissions.
        staging = out_dir.parent / f".{out_dir.name}.importing-{uuid.uuid4().hex}"
        staging.mkdir()
    except OSError as error:
        raise ModelLoadError(f"{out_dir}: cannot create the import directory ({error})") from error
    try:
        try:
            write_into(staging)
        except OSError as error:
            raise ModelLoadError(f"{out_dir}: writing the imported model failed ({error})") from error
        try:
            os.rename(staging, out_dir)
        except OSError as error:
            if out_dir.exists():
                raise InvalidArgumentError("out_dir", f"{out_dir} was created by another import meanwhile") from error
            raise ModelLoadError(f"{out_dir}: cannot move the finished import into place ({error})") from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)
