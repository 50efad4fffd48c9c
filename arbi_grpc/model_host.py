"""The resident chat models and the admission gate in front of them: load, unload and switch one model by name
with a drain, drain and resume all of them, and the runtime scheduling settings. The models by name live in
`ResidentModels`; each has its own engine (thread) and KV pool, and a new load is checked against one memory
budget holding every resident model (`memory/residents.py`).

Every method runs on the gRPC server's event loop, so the state changes atomically between awaits; a model
loads on a worker thread while the loop keeps serving. A request is admitted and submitted to an engine
within one loop turn, so it is never handed to an engine that a switch has already retired. Retired engines
get `drain_timeout_s` to finish their requests; what remains ends with UNAVAILABLE, so no stream hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from typing import Any

from arbi_grpc.config import EngineConfig, SchedulingLimits
from arbi_grpc.engine.engine import Engine
from arbi_grpc.errors import (
    ArbiError, DrainingError, FailedPreconditionError, InvalidArgumentError, UnavailableError,
)
from arbi_grpc.memory.budget import MemoryComponent, MemoryLimit
from arbi_grpc.memory.limits import memory_limit
from arbi_grpc.memory.residents import chat_model_component
from arbi_grpc.model_registry import ResidentModels
from arbi_grpc.model_specs import parse_model_spec
from arbi_grpc.models.model_cache import resolve_model
from arbi_grpc.served_model import Placement, ServedModel

log = logging.getLogger(__name__)

_DRAIN_POLL_S = 0.05

ModelLoader = Callable[[EngineConfig, Placement], ServedModel]


class ModelHost:
    """Owns the resident ServedModels, the drain flag and the engine config new models load with.

    `host_components` (the audio models) are counted in every model's budget; `other_residents` returns the
    components of what else holds memory beside the chat models (the embedding models).
    """

    def __init__(self, config: EngineConfig, loader: ModelLoader, served: ServedModel | None = None,
                 on_readiness_change: Callable[[bool], Awaitable[None]] | None = None,
                 host_components: tuple[MemoryComponent, ...] = (),
                 other_residents: Callable[[], tuple[MemoryComponent, ...]] = tuple,
                 load_wait_s: float = 30.0) -> None:
        self._config = config
        self.load_wait_s = load_wait_s  # how long a request waits for a model that is loading
        self._loader = loader
        self._models = ResidentModels()
        if served is not None:
            self._models.add(served)
        self._on_readiness_change = on_readiness_change
        self._host_components = host_components
        self._other_residents = other_residents
        self._limit: MemoryLimit | None = served.memory_budget.limit if served is not None else None
        self._draining = False
        self._operation: str | None = None  # a load, unload or switch in progress
        self._retiring: set[Engine] = set()
        self.started_at = time.monotonic()

    # -- reads -------------------------------------------------------------------------------------

    @property
    def served(self) -> ServedModel | None:
        """The default model (the first resident one), or None."""
        return self._models.default

    def models(self) -> list[ServedModel]:
        """Every resident chat model, the default first."""
        return self._models.all()

    def memory_limit(self) -> MemoryLimit:
        """The limit every model's budget is checked against, read once, before the first load allocates."""
        if self._limit is None:
            self._limit = memory_limit(self._config)
        return self._limit

    def resident_components(self, excluding: str = "") -> tuple[MemoryComponent, ...]:
        """Each resident chat model (but `excluding`) as one budget component, then the other residents'."""
        shared = tuple(component.name for component in self._host_components)
        chat = tuple(chat_model_component(m.name, m.memory_budget, shared) for m in self.models()
                     if m.name != excluding)
        return chat + tuple(self._other_residents())

    def budget_bytes(self) -> int:
        """Bytes of the server's whole budget on its device: every resident model's component, and the host
        components (the audio models) once on a CPU server."""
        host = self._host_components if self._config.device == "cpu" else ()
        return sum(component.num_bytes for component in (*self.resident_components(), *host))

    @property
    def config(self) -> EngineConfig:
        """The engine config in force (runtime settings applied); new models load with it."""
        return self._config

    def readiness(self) -> tuple[bool, str]:
        """(ready, reason): whether a generate request for the default model would be admitted now."""
        served = self.served
        if served is None:
            return False, self._operation or "no model is resident"
        if self._draining:
            return False, "the server is draining"
        if served.engine.failure is not None:
            return False, str(served.engine.failure)
        return True, ""

    def resident(self, model: str) -> ServedModel:
        """The resident model `model` names (empty: the default); for tokenizer calls. NOT_FOUND for a name
        that is not served, UNAVAILABLE while it loads."""
        return self._models.get(model)

    async def ready(self, model: str) -> None:
        """Waits up to `load_wait_s` while the model `model` names (empty: the default) is loading; UNAVAILABLE
        with the reason once the wait is over and it is still loading. Call it before `resident` or `admit`."""
        await self._models.ready(model, self.load_wait_s)

    def admit(self, model: str) -> ServedModel:
        """The model a new generate request goes to; UNAVAILABLE while draining or without a model."""
        if self._draining:
            raise DrainingError("the server is draining and admits no new requests; retry later")
        served = self.resident(model)
        if served.engine.failure is not None:
            raise served.engine.failure
        return served

    # -- model lifecycle ---------------------------------------------------------------------------

    async def load(self, spec: str | EngineConfig, pending: tuple[MemoryComponent, ...] = ()) -> ServedModel:
        """Loads a chat model beside the resident ones: `spec` (SPEC or NAME=SPEC, with the engine config new
        models load with) or a model's own engine config (a models file's entry). `pending`: the estimated
        chat models still to load after it, which its default KV pool leaves room for and splits with."""
        config = spec if isinstance(spec, EngineConfig) else self._model_config(spec)
        with self._exclusive(f"loading {config.model!r}"):
            name = await self._served_name(config.model)
            self._models.begin_load(name, f"loading {config.model!r}")
            try:
                served = await self._load(config, Placement(self.resident_components(), self._host_components,
                                                            self.memory_limit(), pending))
                try:
                    self._models.add(served)
                except ArbiError:
                    await asyncio.to_thread(served.engine.shutdown)
                    raise
            finally:
                self._models.end_load(name)
        await self._publish()
        return served

    async def unload(self, name: str, drain_timeout_s: float) -> tuple[str, int]:
        """Drains and frees the resident model `name` (empty: the default); returns its name and how many
        requests were ended. The next model in order becomes the default when the default goes."""
        if self.served is None:
            raise FailedPreconditionError("no model is resident; load one with LoadModel")
        served = self._models.get(name)
        with self._exclusive(f"unloading {served.name!r}"):
            self._models.remove(served.name)
            await self._publish()
            ended = await self._retire(served, drain_timeout_s, UnavailableError(
                f"model {served.name!r} was unloaded before this request finished"))
        return served.name, ended

    async def switch(self, spec: str, drain_timeout_s: float, replace: str = "") -> tuple[ServedModel, str, int]:
        """Loads `spec` while the resident model `replace` (empty: the default) serves, then puts the new model
        in its place and drains the old one.

        Returns the new model, the old model's name and how many of its requests were ended. A failed
        load raises and leaves the old model serving.
        """
        if self.served is None:
            raise FailedPreconditionError("no model is resident; load one with LoadModel")
        old = self._models.get(replace)
        config = self._model_config(spec)
        with self._exclusive(f"switching from {old.name!r} to {config.model!r}"):
            name = await self._served_name(config.model)
            if name != old.name and name in self._models.names:
                raise FailedPreconditionError(f"model {name!r} is resident already; switch it, or serve the new "
                                              "model under another name (NAME=SPEC)")
            new = await self._load(config, Placement(self.resident_components(), self._host_components,
                                                     self.memory_limit()))
            try:
                self._models.replace(old.name, new)
            except ArbiError:
                await asyncio.to_thread(new.engine.shutdown)
                raise
            log.info("switched from %s to %s; draining the old model", old.name, new.name)
            ended = await self._retire(old, drain_timeout_s, UnavailableError(
                f"model {old.name!r} was switched to {new.name!r} before this request finished; retry"))
        return new, old.name, ended

    async def shutdown(self) -> None:
        """Stops every engine (the resident ones and any still draining)."""
        engines = self.engines()
        for served in self.models():
            self._models.remove(served.name)
        for engine in engines:
            await asyncio.to_thread(engine.shutdown)

    async def rebuild_quiesced(self, model: str, operation: str, drain_timeout_s: float,
                               rebuild: Callable[[Engine], Future], config: EngineConfig) -> tuple[Any, int]:
        """Calls `rebuild(engine)`, an engine call (its future resolves on the engine thread), on the engine of the
        resident model `model` names (empty: the default) once no request is in it: admission stops, requests in
        flight on it get `drain_timeout_s`, the rest are cancelled; admission resumes afterwards unless a drain was
        already in force. When `rebuild` succeeds on the default model, `config` becomes the config new models load
        with. Returns rebuild's result and how many requests were cancelled.
        """
        self._require_resident()
        served = self._models.get(model)
        with self._exclusive(operation):
            was_draining = self._draining
            await self.drain(0)
            try:
                remaining = await self._wait_idle([served.engine], drain_timeout_s)
                snapshots = await asyncio.wrap_future(served.engine.list_requests()) if remaining else []
                cancelled = [await asyncio.wrap_future(served.engine.cancel(s.request_id)) for s in snapshots]
                result = await asyncio.wrap_future(rebuild(served.engine))
                if served is self.served:
                    self._config = config
            finally:
                if not was_draining:
                    await self.resume()
        return result, sum(cancelled)

    # -- drain and resume --------------------------------------------------------------------------

    async def drain(self, timeout_s: float) -> int:
        """Stops admitting; waits up to `timeout_s` for requests in flight; returns how many remain."""
        if not self._draining:
            self._draining = True
            await self._publish()
        return await self._wait_idle(self.engines(), timeout_s)

    async def resume(self) -> None:
        if self._draining:
            self._draining = False
            await self._publish()

    # -- runtime settings --------------------------------------------------------------------------

    def runtime_settings(self) -> SchedulingLimits:
        """The limits in force: the config's, an auto max_running_requests as the default model resolved it (the
        most it may become while none is resident)."""
        return self._limits_for(self.served)

    def _limits_for(self, served: ServedModel | None) -> SchedulingLimits:
        if not self._config.running_requests_auto:
            return self._config.scheduling_limits
        count = served.config.max_running_requests if served is not None else self._config.max_running_requests_bound
        return self._config.with_running_requests(count).scheduling_limits

    async def update_runtime_settings(self, settings: SchedulingLimits) -> SchedulingLimits:
        """Applies validated settings to the config new models load with and to the resident engine. More running
        requests than a resident engine was built for is refused: its batch slots (and the KV storage's state per
        slot or first block) are sized at load. The settings apply to every resident model."""
        for served in self.models():
            capacity = served.engine.max_running_capacity
            if settings.max_running_requests > capacity:
                raise FailedPreconditionError(
                    f"max_running_requests: model {served.name!r} was loaded for at most {capacity} running "
                    f"requests (its batch slots are sized at load); lower it freely, or restart with "
                    f"--max-running-requests {settings.max_running_requests}"
                )
        self._config = dataclasses.replace(self._config, **dataclasses.asdict(settings))
        for served in self.models():
            await self._apply(served.engine, settings)
        return settings

    # -- internals ---------------------------------------------------------------------------------

    def engines(self) -> list[Engine]:
        """The resident models' engines and those of models still draining after a switch or unload."""
        return [served.engine for served in self.models()] + list(self._retiring)

    def watch_engine(self, engine: Engine) -> None:
        """Republish readiness (from this event loop) when `engine`'s loop fails; call on the server's loop."""
        loop = asyncio.get_running_loop()
        engine.on_failure = lambda _: asyncio.run_coroutine_threadsafe(self._publish(), loop)

    def _require_resident(self) -> ServedModel:
        if self.served is None:
            raise FailedPreconditionError("no model is resident; load one with LoadModel")
        return self.served

    def _model_config(self, spec: str) -> EngineConfig:
        if not spec.strip():
            raise InvalidArgumentError("model", "name the model to load")
        return dataclasses.replace(self._config, model=str(parse_model_spec(spec)), models_file="")

    @staticmethod
    async def _served_name(model: str) -> str:
        """The name `model` (SPEC or NAME=SPEC) will be served under: NAME, else the resolved model's name
        (resolving imports a known model into the cache on its first use, as the load would)."""
        spec = parse_model_spec(model)
        return spec.name or (await asyncio.to_thread(resolve_model, spec.spec)).name

    async def _load(self, config: EngineConfig, placement: Placement) -> ServedModel:
        served = await asyncio.to_thread(self._loader, config, placement)
        self.watch_engine(served.engine)
        await self._apply(served.engine, self._limits_for(served))  # in case they changed during the load
        return served

    @staticmethod
    async def _apply(engine: Engine, limits: SchedulingLimits) -> None:
        await asyncio.wrap_future(engine.update_limits(limits))

    @contextlib.contextmanager
    def _exclusive(self, operation: str) -> Iterator[None]:
        """Marks a model operation in progress; a second one meanwhile is refused."""
        if self._operation is not None:
            raise FailedPreconditionError(f"another model operation is in progress ({self._operation})")
        self._operation = operation
        try:
            yield
        finally:
            self._operation = None

    async def _retire(self, served: ServedModel, drain_timeout_s: float, error: ArbiError) -> int:
        engine = served.engine
        self._retiring.add(engine)
        try:
            ended = await self._wait_idle([engine], drain_timeout_s)
            await asyncio.to_thread(engine.shutdown, error)
        finally:
            self._retiring.discard(engine)
        return ended

    @staticmethod
    async def _wait_idle(engines: list[Engine], timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while (remaining := sum(e.num_requests for e in engines)) and time.monotonic() < deadline:
            await asyncio.sleep(_DRAIN_POLL_S)
        return remaining

    async def _publish(self) -> None:
        if self._on_readiness_change is not None:
            await self._on_readiness_change(self.readiness()[0])
