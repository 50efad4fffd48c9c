"""The chat models a server serves: `--model` (repeatable; `NAME=SPEC` serves SPEC under NAME) or a models file
(`--models-file`, TOML), each with the engine config its engine loads with. The first is the default model,
the one a request with an empty `model` field goes to.

A models file lists `[[model]]` tables: `spec` (required: a known name, model directory or .gguf file, as
`--model`), `name` (optional: the served name, default the model's own) and any EngineConfig setting except
the server-wide ones (`model`, `models_file`, `device`, `memory_limit_mib`, `gpu_memory_utilization`,
`torch_threads`) (per-model overrides of the flags, e.g. `kv_cache_memory_mib`, `max_model_len`):

    [[model]]
    name = "chat"
    spec = "SmolLM2-135M-Instruct"
    kv_cache_memory_mib = 64
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arbi_grpc.config import EngineConfig
from arbi_grpc.errors import InvalidArgumentError

_FILE_ONLY_KEYS = ("name", "spec")
# One server, one device and one memory limit: these stay the server's.
_NOT_PER_MODEL = ("model", "models_file", "device", "memory_limit_mib", "gpu_memory_utilization", "torch_threads")


@dataclass(frozen=True)
class ModelSpec:
    """One chat model to serve: the served name ("" = the model's own name) and what to load."""

    name: str
    spec: str

    def __str__(self) -> str:
        return f"{self.name}={self.spec}" if self.name else self.spec


def parse_model_spec(text: str) -> ModelSpec:
    """`SPEC` or `NAME=SPEC`; InvalidArgumentError("model", ...) when either side is empty."""
    name, separator, spec = text.strip().partition("=")
    if not separator:
        name, spec = "", name
    name, spec = name.strip(), spec.strip()
    if not spec or (separator and not name):
        raise InvalidArgumentError("model", f"expected SPEC or NAME=SPEC, got {text!r}")
    return ModelSpec(name, spec)


def served_model_configs(config: EngineConfig) -> list[EngineConfig]:
    """One engine config per chat model, the default model first: from `config.models_file` when set, else
    from `config.model` (comma-separated as the repeated flag joins it). Each holds one `model` (`NAME=SPEC`
    when named) and an empty `models_file`. Served names must be unique, which a load checks as it resolves
    them (`ResidentModels`)."""
    if config.models_file:
        if config.model != _default_model():
            raise InvalidArgumentError("models_file", "list the models either in the file or with --model, not both")
        entries = read_models_file(Path(config.models_file))
    else:
        entries = [(parse_model_spec(text), {}) for text in config.model.split(",") if text.strip()]
    if not entries:
        raise InvalidArgumentError("model", "name at least one model to serve")
    configs = []
    for spec, options in entries:
        try:
            configs.append(dataclasses.replace(config, model=str(spec), models_file="", **options))
        except InvalidArgumentError as error:
            raise InvalidArgumentError(error.field, f"model {str(spec)!r}: {error.description}") from None
    return configs


def read_models_file(path: Path) -> list[tuple[ModelSpec, dict[str, Any]]]:
    """The (spec, per-model settings) entries of a models file, in order; InvalidArgumentError("models_file", ...)
    naming the entry and key of anything wrong."""
    try:
        document = tomllib.loads(path.expanduser().read_text())
    except OSError as error:
        raise InvalidArgumentError("models_file", f"cannot read {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise InvalidArgumentError("models_file", f"{path} is not valid TOML: {error}") from None
    tables = document.get("model")
    unknown_top = sorted(set(document) - {"model"})
    if unknown_top or not isinstance(tables, list) or not tables:
        raise InvalidArgumentError("models_file", f"{path}: expected one or more [[model]] tables"
                                                  + (f", not {', '.join(unknown_top)}" if unknown_top else ""))
    settings = {field.name for field in dataclasses.fields(EngineConfig)} - set(_NOT_PER_MODEL)
    entries = []
    for index, table in enumerate(tables, start=1):
        where = f"{path}: model {index}"
        if not isinstance(table.get("spec"), str) or not table["spec"].strip():
            raise InvalidArgumentError("models_file", f"{where}: 'spec' (the model to load) is required")
        unknown = sorted(set(table) - settings - set(_FILE_ONLY_KEYS))
        if unknown:
            raise InvalidArgumentError("models_file", f"{where}: unknown key(s) {', '.join(unknown)}; per-model "
                                                      "keys are name, spec and the EngineConfig settings")
        for key, value in table.items():
            if key not in _FILE_ONLY_KEYS:
                _check_type(where, key, value)
        name = table.get("name", "")
        if not isinstance(name, str):
            raise InvalidArgumentError("models_file", f"{where}: 'name' must be a string")
        spec = parse_model_spec(f"{name}={table['spec']}" if name else table["spec"])
        entries.append((spec, {key: value for key, value in table.items() if key not in _FILE_ONLY_KEYS}))
    return entries


def _check_type(where: str, key: str, value: Any) -> None:
    default = next(field.default for field in dataclasses.fields(EngineConfig) if field.name == key)
    expected = float if isinstance(default, float) else type(default)
    fits = isinstance(value, expected) and (expected is bool or not isinstance(value, bool))
    if not (fits or (expected is float and isinstance(value, int) and not isinstance(value, bool))):
        raise InvalidArgumentError("models_file", f"{where}: {key} must be {expected.__name__}, got {value!r}")


def _default_model() -> str:
    return next(field.default for field in dataclasses.fields(EngineConfig) if field.name == "model")
