"""The resident model and the admission gate in front of it: load, unload and switch with a drain, drain
and resume, and the runtime scheduling settings.

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
    ArbiError, DrainingError, FailedPreconditionError, InvalidArgumentError, NotFoundError, UnavailableError,
)
from arbi_grpc.served_model import ServedModel

log = logging.getLogger(__name__)

_DRAIN_POLL_S = 0.05

ModelLoader = Callable[[EngineConfig], ServedModel]


class ModelHost:
    """Owns the resident ServedModel, the drain flag and the engine config new models load with."""

    def __init__(self, config: EngineConfig, loader: ModelLoader, served: ServedModel | None = None,
                 on_readiness_change: Callable[[bool], Awaitable[None]] | None = None) -> None:
        self._config = config
        self._loader = loader
        self._served = served
        self._on_readiness_change = on_readiness_change
        self._draining = False
        self._operation: str | None = None  # a load, unload or switch in progress
        self._retiring: set[Engine] = set()
        self.started_at = time.monotonic()

    # -- reads -------------------------------------------------------------------------------------

    @property
    def served(self) -> ServedModel | None:
        return self._served

    @property
    def config(self) -> EngineConfig:
        """The engine config in force (runtime settings applied); new models load with it."""
        return self._config

    def readiness(self) -> tuple[bool, str]:
        """(ready, reason): whether a generate request would be admitted now."""
        if self._served is None:
            return False, self._operation or "no model is resident"
        if self._draining:
            return False, "the server is draining"
        if self._served.engine.failure is not None:
            return False, str(self._served.engine.failure)
        return True, ""

    def resident(self, model: str) -> ServedModel:
        """The resident model if `model` names it (empty names it); for tokenizer calls."""
        served = self._served
        if served is None:
            raise UnavailableError(f"no model is resident ({self._operation or 'none loaded'}); retry later")
        if model and model != served.name:
            raise NotFoundError(
                f"model {model!r} is not served here; the resident model is {served.name!r}"
            )
        return served

    def admit(self, model: str) -> ServedModel:
        """The model a new generate request goes to; UNAVAILABLE while draining or without a model."""
        if self._draining:
            raise DrainingError("the server is draining and admits no new requests; retry later")
        served = self.resident(model)
        if served.engine.failure is not None:
            raise served.engine.failure
        return served

    # -- model lifecycle ---------------------------------------------------------------------------

    async def load(self, spec: str) -> ServedModel:
        """Loads `spec` when no model is resident."""
        if self._served is not None:
            raise FailedPreconditionError(
                f"model {self._served.name!r} is resident; switch models with SwitchModel"
            )
        with self._exclusive(f"loading {spec!r}"):
            self._served = await self._load(spec)
        await self._publish()
        return self._served

    async def unload(self, drain_timeout_s: float) -> tuple[str, int]:
        """Drains and frees the resident model; returns its name and how many requests were ended."""
        served = self._require_resident()
        with self._exclusive(f"unloading {served.name!r}"):
            self._served = None
            await self._publish()
            ended = await self._retire(served, drain_timeout_s, UnavailableError(
                f"model {served.name!r} was unloaded before this request finished"))
        return served.name, ended

    async def switch(self, spec: str, drain_timeout_s: float) -> tuple[ServedModel, str, int]:
        """Loads `spec` while the old model serves, then swaps and drains the old one.

        Returns the new model, the old model's name and how many of its requests were ended. A failed
        load raises and leaves the old model serving.
        """
        old = self._require_resident()
        with self._exclusive(f"switching from {old.name!r} to {spec!r}"):
            new = await self._load(spec)
            self._served = new
            log.info("switched from %s to %s; draining the old model", old.name, new.name)
            ended = await self._retire(old, drain_timeout_s, UnavailableError(
                f"model {old.name!r} was switched to {new.name!r} before this request finished; retry"))
        return new, old.name, ended

    async def shutdown(self) -> None:
        """Stops every engine (the resident one and any still draining)."""
        engines = self.engines()
        self._served = None
        for engine in engines:
            await asyncio.to_thread(engine.shutdown)

    async def rebuild_quiesced(self, operation: str, drain_timeout_s: float, rebuild: Callable[[Engine], Future],
                               config: EngineConfig) -> tuple[Any, int]:
        """Calls `rebuild(engine)`, an engine call (its future resolves on the engine thread), on the resident
        engine once no request is in it: admission stops, requests in flight get `drain_timeout_s`, the rest are
        cancelled; admission resumes afterwards unless a drain was already in force. When `rebuild` succeeds,
        `config` becomes the config new models load with. Returns rebuild's result and how many requests were
        cancelled.
        """
        served = self._require_resident()
        with self._exclusive(operation):
            was_draining = self._draining
            await self.drain(0)
            try:
                remaining = await self._wait_idle([served.engine], drain_timeout_s)
                snapshots = await asyncio.wrap_future(served.engine.list_requests()) if remaining else []
                cancelled = [await asyncio.wrap_future(served.engine.cancel(s.request_id)) for s in snapshots]
                result = await asyncio.wrap_future(rebuild(served.engine))
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
        return self._config.scheduling_limits

    async def update_runtime_settings(self, settings: SchedulingLimits) -> SchedulingLimits:
        """Applies validated settings to the config new models load with and to the resident engine. More running
        requests than the resident engine was built for is refused: its batch slots (and the KV storage's state per
        slot or first block) are sized at load."""
        if self._served is not None:
            capacity = self._served.engine.max_running_capacity
            if settings.max_running_requests > capacity:
                raise FailedPreconditionError(
                    f"max_running_requests: the resident model was loaded for at most {capacity} running requests "
                    f"(its batch slots are sized at load); lower it freely, or restart with "
                    f"--max-running-requests {settings.max_running_requests}"
                )
        self._config = dataclasses.replace(self._config, **dataclasses.asdict(settings))
        if self._served is not None:
            await self._apply(self._served.engine, settings)
        return settings

    # -- internals ---------------------------------------------------------------------------------

    def engines(self) -> list[Engine]:
        """The resident model's engine and those of models still draining after a switch or unload."""
        return ([self._served.engine] if self._served else []) + list(self._retiring)

    def watch_engine(self, engine: Engine) -> None:
        """Republish readiness (from this event loop) when `engine`'s loop fails; call on the server's loop."""
        loop = asyncio.get_running_loop()
        engine.on_failure = lambda _: asyncio.run_coroutine_threadsafe(self._publish(), loop)

    def _require_resident(self) -> ServedModel:
        if self._served is None:
            raise FailedPreconditionError("no model is resident; load one with LoadModel")
        return self._served

    async def _load(self, spec: str) -> ServedModel:
        if not spec.strip():
            raise InvalidArgumentError("model", "name the model to load")
        served = await asyncio.to_thread(self._loader, dataclasses.replace(self._config, model=spec))
        self.watch_engine(served.engine)
        await self._apply(served.engine, self.runtime_settings())  # in case they changed during the load
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
