"""The resident chat models by served name, in order (the first is the default model, the one a request with an
empty `model` field goes to), and the names being loaded.

A request naming a model that is loading waits for its load up to a bound (`ready`), then fails UNAVAILABLE with
the reason (retryable); a name neither resident nor loading is NOT_FOUND, listing the resident names. Methods are
called on the server's event loop only.
"""

from __future__ import annotations

import asyncio

from arbi_grpc.errors import FailedPreconditionError, NotFoundError, UnavailableError
from arbi_grpc.served_model import ServedModel


class ResidentModels:
    """Served names to ServedModels, in the order they were configured or loaded."""

    def __init__(self) -> None:
        self._models: dict[str, ServedModel] = {}
        self._loading: dict[str, str] = {}  # name -> the operation loading it
        self._loaded: dict[str, asyncio.Event] = {}  # name -> set when its load ends (loaded or failed)

    @property
    def names(self) -> list[str]:
        return list(self._models)

    @property
    def default(self) -> ServedModel | None:
        return next(iter(self._models.values()), None)

    def all(self) -> list[ServedModel]:
        return list(self._models.values())

    def loading(self) -> dict[str, str]:
        return dict(self._loading)

    def get(self, name: str) -> ServedModel:
        """The model `name` serves (empty: the default model)."""
        if not name:
            served = self.default
            if served is None:
                loading = "; ".join(self._loading.values())
                raise UnavailableError(f"no model is resident ({loading or 'none loaded'}); retry later")
            return served
        served = self._models.get(name)
        if served is not None:
            return served
        if name in self._loading:
            raise UnavailableError(f"model {name!r} is not ready: {self._loading[name]}; retry later")
        raise NotFoundError(f"model {name!r} is not served here; the resident models are {self.names}")

    async def ready(self, name: str, timeout_s: float) -> None:
        """Waits while the model `name` (empty: the default, while none is resident) is loading, for at most
        `timeout_s` in all; then UNAVAILABLE naming the load and the bound. Returns at once when there is no such
        load (resident, unknown or failed: `get` then says which)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while (waiting := self._load_awaited(name)) is not None:
            loading, done = waiting
            remaining = deadline - asyncio.get_running_loop().time()
            try:
                if remaining <= 0:
                    raise TimeoutError
                await asyncio.wait_for(done.wait(), remaining)
            except TimeoutError:
                raise UnavailableError(f"model {loading!r} is still loading ({self._loading[loading]}) after "
                                       f"waiting {timeout_s:g} s (--model-load-wait-ms); retry later") from None

    def _load_awaited(self, name: str) -> tuple[str, asyncio.Event] | None:
        """(the loading model a request for `name` waits for, its event), or None."""
        if not name and self.default is None:
            name = next(iter(self._loading), "")
        done = self._loaded.get(name)
        return (name, done) if done is not None else None

    def begin_load(self, name: str, operation: str) -> None:
        """Marks `name` as loading; FAILED_PRECONDITION when it is resident or loading already."""
        if name in self._models:
            raise FailedPreconditionError(f"model {name!r} is resident; unload it first, or switch it with "
                                          "SwitchModel")
        if name in self._loading:
            raise FailedPreconditionError(f"model {name!r} is already loading ({self._loading[name]})")
        self._loading[name] = operation
        self._loaded[name] = asyncio.Event()

    def end_load(self, name: str) -> None:
        self._loading.pop(name, None)
        done = self._loaded.pop(name, None)
        if done is not None:
            done.set()

    def add(self, served: ServedModel) -> None:
        """Adds a loaded model last; FAILED_PRECONDITION when its served name is taken."""
        if served.name in self._models:
            raise FailedPreconditionError(f"a model named {served.name!r} is resident already; serve the new one "
                                          f"under another name (NAME=SPEC)")
        self._models[served.name] = served

    def replace(self, old: str, new: ServedModel) -> None:
        """Puts `new` in `old`'s place (the default stays the default); FAILED_PRECONDITION when `new`'s name is
        another resident model's."""
        if new.name != old and new.name in self._models:
            raise FailedPreconditionError(f"a model named {new.name!r} is resident already; serve the new one "
                                          f"under another name (NAME=SPEC)")
        self._models = {(new.name if name == old else name): (new if name == old else served)
                        for name, served in self._models.items()}

    def remove(self, name: str) -> ServedModel:
        """Removes and returns the resident model `name` (empty: the default)."""
        served = self.get(name) if name else self.default
        if served is None:
            raise FailedPreconditionError("no model is resident; load one with LoadModel")
        del self._models[served.name]
        return served
