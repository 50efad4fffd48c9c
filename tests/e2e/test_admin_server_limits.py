"""Server limits from ServerConfig: enforced by the transport and reported by GetServerInfo. The server
here has no model loaded; limits and auth act before any handler needs one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from arbi_client import ArbiClient
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.server_config import ServerConfig

LIMITS = ServerConfig(max_message_mib=1, max_concurrent_streams=8, keepalive_time_ms=30_000,
                      keepalive_timeout_ms=5_000, max_session_generations=4)


@pytest.fixture(scope="module")
def limited_server(model_cache_dir: Path) -> Iterator:
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.server import GrpcServer

    server = GrpcServer(EngineConfig(), config=LIMITS).start()
    yield server
    server.stop()


def test_limits_are_reported_and_enforced(limited_server) -> None:
    with ArbiClient(limited_server.target, admin_token=limited_server.credentials.admin_token) as client:
        limits = client.get_server_info().limits
        assert (limits.max_message_bytes, limits.max_concurrent_streams) == (2**20, 8)
        assert (limits.keepalive_time_ms, limits.keepalive_timeout_ms) == (30_000, 5_000)
        assert limits.max_session_generations == 4
        with pytest.raises(grpc.RpcError) as too_big:
            client.tokenize("x" * (2 * 2**20))
        assert too_big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        with pytest.raises(grpc.RpcError) as no_model:  # a message under the limit reaches the handler
            client.tokenize("x" * 1000)
        assert no_model.value.code() == grpc.StatusCode.UNAVAILABLE


def test_bad_limits_are_refused_at_construction() -> None:
    for field, value in (("max_message_mib", 0), ("port", 70_000), ("max_session_generations", 0),
                         ("drain_timeout_ms", -1), ("generate_token", "short")):
        with pytest.raises(InvalidArgumentError, match=field):
            ServerConfig(**{field: value})
