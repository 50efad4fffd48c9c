"""ResidentModels: routing by served name (empty: the default, the first), UNAVAILABLE while a name loads, a
bounded wait for a load in progress (answered when the load ends, UNAVAILABLE with the reason past the bound),
NOT_FOUND listing the resident names, duplicate names refused, a switch keeping the order, an unload promoting
the next model to default. Models are stand-ins with a name (the registry reads nothing else)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from arbi_grpc.errors import FailedPreconditionError, NotFoundError, UnavailableError
from arbi_grpc.model_registry import ResidentModels


def _model(name: str) -> SimpleNamespace:
    return SimpleNamespace(name=name)


def test_requests_route_by_name_and_the_first_model_is_the_default() -> None:
    models = ResidentModels()
    with pytest.raises(UnavailableError, match="no model is resident"):
        models.get("")
    chat, other = _model("chat"), _model("other")
    models.add(chat)
    models.add(other)
    assert models.get("") is chat and models.get("other") is other and models.names == ["chat", "other"]
    with pytest.raises(NotFoundError, match=r"model 'nope' is not served here; the resident models are \['chat', 'other'\]"):
        models.get("nope")
    with pytest.raises(FailedPreconditionError, match="'chat' is resident already"):
        models.add(_model("chat"))


def test_a_loading_model_is_unavailable_with_the_reason() -> None:
    models = ResidentModels()
    models.begin_load("next", "loading 'next=/m'")
    with pytest.raises(UnavailableError, match="model 'next' is not ready: loading 'next=/m'; retry later"):
        models.get("next")
    with pytest.raises(UnavailableError, match=r"no model is resident \(loading 'next=/m'\)"):
        models.get("")
    with pytest.raises(FailedPreconditionError, match="already loading"):
        models.begin_load("next", "again")
    models.add(_model("next"))
    models.end_load("next")
    assert models.get("next").name == "next" and models.loading() == {}
    with pytest.raises(FailedPreconditionError, match="'next' is resident"):
        models.begin_load("next", "a second time")


def test_a_request_waits_for_a_load_up_to_the_bound() -> None:
    async def scenario() -> None:
        models = ResidentModels()
        await models.ready("absent", 5.0)  # nothing loading: returns at once, `get` says NOT_FOUND
        models.begin_load("next", "loading 'next=/m'")
        started = time.monotonic()
        with pytest.raises(UnavailableError, match=r"model 'next' is still loading \(loading 'next=/m'\) after "
                                                   r"waiting 0.2 s \(--model-load-wait-ms\); retry later"):
            await models.ready("next", 0.2)
        assert 0.2 <= time.monotonic() - started < 2.0
        with pytest.raises(UnavailableError, match="model 'next' is still loading"):
            await models.ready("", 0.0)  # no default yet: the first load in progress is waited for

        async def finish_load() -> None:
            await asyncio.sleep(0.1)
            models.add(_model("next"))
            models.end_load("next")

        waiters = [asyncio.ensure_future(models.ready(name, 30.0)) for name in ("next", "")]
        await asyncio.gather(finish_load(), *waiters)
        assert models.get("next").name == models.get("").name == "next"

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_switch_keeps_the_place_and_unload_promotes_the_next_model() -> None:
    models = ResidentModels()
    for name in ("a", "b", "c"):
        models.add(_model(name))
    models.replace("a", _model("a2"))
    assert models.names == ["a2", "b", "c"]
    with pytest.raises(FailedPreconditionError, match="'c' is resident already"):
        models.replace("b", _model("c"))
    assert models.remove("").name == "a2"
    assert models.get("").name == "b"
    assert models.remove("c").name == "c" and models.names == ["b"]
    with pytest.raises(NotFoundError):
        models.remove("c")
    models.remove("b")
    with pytest.raises(FailedPreconditionError, match="no model is resident"):
        models.remove("")
