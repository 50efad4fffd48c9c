"""The caller's tenant: a handler wrapped by `as_tenant` sees it (and so do the tasks it starts), for
unary and streaming handlers whether they return or yield; outside a keyed call the request's field wins."""

from __future__ import annotations

import asyncio

import grpc

from arbi_grpc.auth.caller import as_tenant, caller_tenant, request_tenant


async def _in_a_task() -> str | None:
    return await asyncio.ensure_future(asyncio.sleep(0, caller_tenant()))


async def _unary(request, context):
    return request_tenant(request), await _in_a_task()


async def _yielding(request, context):
    yield request_tenant(request)
    yield await _in_a_task()


def test_wrapped_handlers_run_as_the_tenant() -> None:
    async def run() -> None:
        unary = as_tenant(grpc.unary_unary_rpc_method_handler(_unary), "acme")
        assert await asyncio.ensure_future(unary.unary_unary("globex", None)) == ("acme", "acme")
        streaming = as_tenant(grpc.stream_stream_rpc_method_handler(_yielding), "acme")

        async def read_all() -> list:  # grpc.aio serves each call in a task of its own
            return [item async for item in streaming.stream_stream("globex", None)]

        assert await asyncio.ensure_future(read_all()) == ["acme", "acme"]
        writing = as_tenant(grpc.unary_stream_rpc_method_handler(_unary), "acme")
        assert writing.response_streaming and not writing.request_streaming
        assert await asyncio.ensure_future(writing.unary_stream("globex", None)) == ("acme", "acme")
        assert request_tenant("globex") == "globex" and caller_tenant() is None  # set only inside the calls

    asyncio.run(run())
