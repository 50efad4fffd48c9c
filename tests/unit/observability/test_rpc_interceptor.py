"""The RPC interceptor counts each call once, with the status code the client saw, on a real grpc.aio
server on 127.0.0.1 (unary and streaming handlers; OK, aborts, exceptions, cancellation, deadlines)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from prometheus_client import CollectorRegistry, Counter

from arbi_grpc.observability.rpc_interceptor import RpcMetricsInterceptor

SERVICE = "test.v1.Probe"


async def _unary_ok(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return request


async def _unary_not_found(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    await context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")


async def _unary_crash(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    raise RuntimeError("bug")


async def _stream_ok(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    for _ in range(3):
        yield request


async def _stream_invalid(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    yield request
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad field")


async def _stream_slow(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    for _ in range(200):
        yield request
        await asyncio.sleep(0.05)


async def _bidi_echo(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    async for request in requests:
        yield request


@pytest.fixture(scope="module")
def probe() -> Iterator[tuple[str, CollectorRegistry]]:
    registry = CollectorRegistry()
    counter = Counter("probe_rpc_requests", "test", ["rpc", "code"], registry=registry)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    handlers = grpc.method_handlers_generic_handler(SERVICE, {
        "UnaryOk": grpc.unary_unary_rpc_method_handler(_unary_ok),
        "UnaryNotFound": grpc.unary_unary_rpc_method_handler(_unary_not_found),
        "UnaryCrash": grpc.unary_unary_rpc_method_handler(_unary_crash),
        "StreamOk": grpc.unary_stream_rpc_method_handler(_stream_ok),
        "StreamInvalid": grpc.unary_stream_rpc_method_handler(_stream_invalid),
        "StreamSlow": grpc.unary_stream_rpc_method_handler(_stream_slow),
        "BidiEcho": grpc.stream_stream_rpc_method_handler(_bidi_echo),
    })

    async def start() -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server(interceptors=[RpcMetricsInterceptor(counter)])
        server.add_generic_rpc_handlers((handlers,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    server, port = asyncio.run_coroutine_threadsafe(start(), loop).result()
    yield f"127.0.0.1:{port}", registry
    asyncio.run_coroutine_threadsafe(server.stop(0), loop).result()
    loop.call_soon_threadsafe(loop.stop)
    thread.join()


def _count(registry: CollectorRegistry, method: str, code: str) -> float:
    value = registry.get_sample_value("probe_rpc_requests_total", {"rpc": f"{SERVICE}/{method}", "code": code})
    return 0.0 if value is None else value


def _settled(registry: CollectorRegistry, method: str, code: str, expected: float) -> bool:
    """The server counts an RPC when its handler returns, which may be after the client saw the status (always so
    for a cancellation): wait for the count to land."""
    for _ in range(100):
        if _count(registry, method, code) == expected:
            return True
        threading.Event().wait(0.05)
    return False


def test_each_outcome_is_counted_with_its_code(probe: tuple[str, CollectorRegistry]) -> None:
    target, registry = probe
    with grpc.insecure_channel(target) as channel:
        def call(kind: str, method: str):
            factory = getattr(channel, kind)
            return factory(f"/{SERVICE}/{method}")

        assert call("unary_unary", "UnaryOk")(b"x") == b"x"
        assert list(call("unary_stream", "StreamOk")(b"y")) == [b"y"] * 3
        assert list(call("stream_stream", "BidiEcho")(iter([b"a", b"b"]))) == [b"a", b"b"]
        for kind, method, code in (("unary_unary", "UnaryNotFound", grpc.StatusCode.NOT_FOUND),
                                   ("unary_unary", "UnaryCrash", grpc.StatusCode.UNKNOWN)):
            with pytest.raises(grpc.RpcError) as failed:
                call(kind, method)(b"z")
            assert failed.value.code() is code
        with pytest.raises(grpc.RpcError) as invalid:
            list(call("unary_stream", "StreamInvalid")(b"z"))
        assert invalid.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        cancelled = call("unary_stream", "StreamSlow")(b"c")
        next(cancelled)
        cancelled.cancel()
        with pytest.raises(grpc.RpcError) as late:
            list(call("unary_stream", "StreamSlow")(b"d", timeout=0.3))
        assert late.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED

    for method, code in (("UnaryOk", "OK"), ("StreamOk", "OK"), ("BidiEcho", "OK"),
                         ("UnaryNotFound", "NOT_FOUND"), ("UnaryCrash", "UNKNOWN"),
                         ("StreamInvalid", "INVALID_ARGUMENT")):
        assert _settled(registry, method, code, 1), (method, code)
    assert _settled(registry, "StreamSlow", "CANCELLED", 1)
    assert _settled(registry, "StreamSlow", "DEADLINE_EXCEEDED", 1)
    assert _count(registry, "StreamSlow", "OK") == 0
