"""Where admin LoadModel and SwitchModel may read models from: the configured model roots.

A spec naming an embedded model, or a name that is no path on disk (an earlier import), resolves in the
model cache and is allowed. A spec that is a path is resolved (symlinks followed, `..` removed) and must lie
under one of the roots, themselves resolved; anything else is refused with PERMISSION_DENIED naming the roots.
"""

from __future__ import annotations

import os
from pathlib import Path

from arbi_grpc.errors import PermissionDeniedError
from arbi_grpc.models.model_cache import EMBEDDED_MODELS, default_cache_root


def model_roots(configured: str) -> tuple[Path, ...]:
    """The `--model-roots` directories (separated by os.pathsep), or the model cache when none is set."""
    entries = [entry for entry in configured.split(os.pathsep) if entry.strip()]
    return tuple(Path(entry).expanduser().resolve() for entry in entries) or (default_cache_root().resolve(),)


def check_model_spec(spec: str, roots: tuple[Path, ...]) -> None:
    """Returns when `spec` may be loaded; raises PermissionDeniedError for a path outside every root."""
    if any(model.name == spec for model in EMBEDDED_MODELS):
        return
    path = Path(spec).expanduser()
    if not path.exists() and os.sep not in spec and not spec.lower().endswith(".gguf"):
        return  # a cached import's name: resolved inside the cache
    resolved = path.resolve()
    if not any(resolved.is_relative_to(root) for root in roots):
        raise PermissionDeniedError(
            f"model: {spec!r} resolves to {resolved}, outside the model roots ({', '.join(map(str, roots))}); "
            "admin calls load models from under --model-roots only"
        )
