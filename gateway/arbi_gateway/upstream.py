"""The gateway's gRPC side: a pool of grpc.aio channels to one arbi-serve server, used round robin.

Callers get a multicallable per RPC path (cached per channel), so the OpenAI routes and the proto routes
reach every RPC the same way. Only the caller's `authorization` header travels on as gRPC metadata.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from arbi_client.tls import PLAINTEXT, ChannelTls, open_aio_channel

_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_FORWARDED_HEADERS = ("authorization",)


class RpcKind(Enum):
    """The streaming shape of an RPC."""

    UNARY_UNARY = "unary_unary"
    UNARY_STREAM = "unary_stream"
    STREAM_UNARY = "stream_unary"
    STREAM_STREAM = "stream_stream"

    @classmethod
    def of(cls, client_streaming: bool, server_streaming: bool) -> RpcKind:
        return {
            (False, False): cls.UNARY_UNARY, (False, True): cls.UNARY_STREAM,
            (True, False): cls.STREAM_UNARY, (True, True): cls.STREAM_STREAM,
        }[(client_streaming, server_streaming)]


class _Connection:
    """One channel and the multicallables made on it."""

    def __init__(self, target: str, tls: ChannelTls) -> None:
        self.channel = open_aio_channel(target, tls, [
            ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
        ])
        self.methods: dict[str, Any] = {}
        self.health = health_pb2_grpc.HealthStub(self.channel)


class Upstream:
    """`channel_count` channels to `target`; open it inside the event loop that will use it."""

    def __init__(self, target: str, channel_count: int, tls: ChannelTls = PLAINTEXT) -> None:
        self.target = target
        self._connections = [_Connection(target, tls) for _ in range(channel_count)]
        self._turn = itertools.cycle(range(channel_count))

    def method(self, path: str, kind: RpcKind, serializer: Callable[[Any], bytes],
               deserializer: Callable[[bytes], Any]) -> Any:
        """The multicallable of RPC `path` ("/package.Service/Method") on the next channel."""
        connection = self._connections[next(self._turn)]
        callable_ = connection.methods.get(path)
        if callable_ is None:
            factory = getattr(connection.channel, kind.value)
            callable_ = factory(path, request_serializer=serializer, response_deserializer=deserializer)
            connection.methods[path] = callable_
        return callable_

    async def is_serving(self, service: str, timeout_s: float) -> bool:
        """Whether the upstream's standard health service reports `service` SERVING."""
        health = self._connections[next(self._turn)].health
        try:
            response = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError:
            return False
        return response.status == health_pb2.HealthCheckResponse.SERVING

    async def close(self) -> None:
        for connection in self._connections:
            await connection.channel.close()


def forwarded_metadata(headers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The gRPC metadata carried over from an HTTP request's headers."""
    return tuple((name, headers[name]) for name in _FORWARDED_HEADERS if name in headers)
