"""A grpc.aio server interceptor that counts every RPC by method and final status code.

The code is what the client sees: the servicer's abort code, OK after a normal end, CANCELLED when the
client went away, DEADLINE_EXCEEDED when its deadline passed, UNKNOWN for an unhandled exception.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from prometheus_client import Counter

_Behavior = Callable[[Any, grpc.aio.ServicerContext], Any]


def _final_code(context: grpc.aio.ServicerContext, error: BaseException | None) -> str:
    if error is None or isinstance(error, grpc.aio.AbortError):
        code = context.code()
        return "OK" if code is None else code.name
    if isinstance(error, (asyncio.CancelledError, GeneratorExit)):
        remaining = context.time_remaining()
        return "DEADLINE_EXCEEDED" if remaining is not None and remaining <= 0 else "CANCELLED"
    return "UNKNOWN"


class RpcMetricsInterceptor(grpc.aio.ServerInterceptor):
    """Wraps each handler so its outcome increments `requests{rpc, code}` exactly once."""

    def __init__(self, requests: Counter) -> None:
        self._requests = requests

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler  # unknown method: grpc answers UNIMPLEMENTED itself
        rpc = handler_call_details.method.lstrip("/")
        if handler.response_streaming:
            if handler.request_streaming:
                return grpc.stream_stream_rpc_method_handler(
                    self._streaming(rpc, handler.stream_stream),
                    handler.request_deserializer, handler.response_serializer,
                )
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(rpc, handler.unary_stream),
                handler.request_deserializer, handler.response_serializer,
            )
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(rpc, handler.stream_unary), handler.request_deserializer, handler.response_serializer,
            )
        return grpc.unary_unary_rpc_method_handler(
            self._unary(rpc, handler.unary_unary), handler.request_deserializer, handler.response_serializer,
        )

    def _count(self, rpc: str, context: grpc.aio.ServicerContext, error: BaseException | None) -> None:
        self._requests.labels(rpc=rpc, code=_final_code(context, error)).inc()

    def _unary(self, rpc: str, behavior: _Behavior) -> _Behavior:
        async def counted(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                response = await behavior(request, context)
            except BaseException as error:
                self._count(rpc, context, error)
                raise
            self._count(rpc, context, None)
            return response

        return counted

    def _streaming(self, rpc: str, behavior: _Behavior) -> _Behavior:
        async def counted(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                result = behavior(request, context)
                if inspect.isasyncgen(result):
                    async for response in result:
                        yield response
                else:  # a coroutine that writes with context.write()
                    await result
            except BaseException as error:
                self._count(rpc, context, error)
                raise
            self._count(rpc, context, None)

        return counted
