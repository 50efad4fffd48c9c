"""Readiness of a server through the standard `grpc.health.v1` service, and target parsing.

The health service needs no credential, so these work before a client has any token.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from arbi_client.tls import PLAINTEXT, ChannelTls, open_channel


def grpc_target(url: str) -> str:
    """`grpc://host:port`, `http://host:port` or `host:port` -> `host:port`."""
    for scheme in ("grpc://", "http://"):
        if url.startswith(scheme):
            url = url[len(scheme):]
    return url.rstrip("/")


def is_serving(target: str, timeout_s: float = 1.0, tls: ChannelTls = PLAINTEXT) -> bool:
    """True when the server at `target` reports SERVING: it has a model and admits requests."""
    with open_channel(target, tls) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=timeout_s
            )
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def wait_until_serving(target: str, timeout_s: float, is_alive: Callable[[], bool] = lambda: True,
                       tls: ChannelTls = PLAINTEXT) -> bool:
    """Polls readiness until it is SERVING (True), `timeout_s` passes or `is_alive()` turns False."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and is_alive():
        if is_serving(target, tls=tls):
            return True
        time.sleep(0.5)
    return False
