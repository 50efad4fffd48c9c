"""A defect inside the engine loop, seen from a client: the stream in progress ends INTERNAL with the cause,
health turns NOT_SERVING, and later requests fail fast with UNAVAILABLE instead of hanging."""

from __future__ import annotations

import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from arbi_grpc.config import EngineConfig
from arbi_grpc.served_model import build_served_model
from arbi_grpc.server import GrpcServer
from tests.e2e.helpers import chat_request, generate, stub_for


def _health(channel: grpc.Channel) -> int:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="")).status


def test_an_engine_failure_ends_streams_and_turns_health_not_serving(smollm2_dir) -> None:
    server = GrpcServer(build_served_model(EngineConfig(model=str(smollm2_dir), kv_cache_memory_mib=64))).start()
    channel, stub = stub_for(f"127.0.0.1:{server.port}")
    try:
        assert _health(channel) == health_pb2.HealthCheckResponse.SERVING
        engine = server.served.engine
        schedule = engine.scheduler.schedule
        steps = iter(range(1000))

        def failing_schedule():
            if next(steps) == 4:  # mid-stream, after the first tokens went out
                raise RuntimeError("injected scheduler defect")
            return schedule()

        engine.scheduler.schedule = failing_schedule
        with pytest.raises(grpc.RpcError) as failed:
            generate(stub, chat_request("Count from one to twenty.", max_output_tokens=64), timeout=60)
        assert failed.value.code() == grpc.StatusCode.INTERNAL
        assert "injected scheduler defect" in failed.value.details()

        deadline = time.monotonic() + 10
        while _health(channel) != health_pb2.HealthCheckResponse.NOT_SERVING and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _health(channel) == health_pb2.HealthCheckResponse.NOT_SERVING
        with pytest.raises(grpc.RpcError) as refused:
            generate(stub, chat_request("Hello"), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "reload the model" in refused.value.details()
    finally:
        channel.close()
        server.stop()
