"""Engine faults seen from a client, triggered through the real API by the debug fault seeds
(`ARBI_DEBUG_FAULTS`): a step that raises fails exactly the requests in it (INTERNAL, ENGINE_STEP_FAILED),
frees their KV blocks, and later requests are served; a fault in the loop itself ends the streams, turns
health NOT_SERVING and refuses later requests with UNAVAILABLE, and `arbi-serve serve` then exits 70 so an
orchestrator restarts it."""

from __future__ import annotations

import os
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_grpc.engine.fault_injection import FAULTS_ENV
from tests.conftest import wait_for_idle_pool
from tests.e2e.helpers import chat_request, error_reason, generate, stub_for
from tests.e2e.serve_process import start_serve

STEP_SEED, LOOP_SEED = 7001, 7002
FAULTS = f"step={STEP_SEED},loop={LOOP_SEED}"
EXIT_ENGINE_FAULT = 70


def _health(channel: grpc.Channel) -> int:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status


def _seeded(question: str, seed: int, max_output_tokens: int = 8) -> pb.GenerateRequest:
    return chat_request(question, max_output_tokens, seed=seed)


def _failure(stub, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as failed:
        generate(stub, request, timeout=60)
    return failed.value


@pytest.fixture(scope="module")
def server(smollm2_dir):
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.served_model import build_served_model
    from arbi_grpc.server import GrpcServer
    from arbi_grpc.server_config import ServerConfig

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(FAULTS_ENV, FAULTS)  # read when the engine is built
        served = build_served_model(EngineConfig(model=str(smollm2_dir), kv_cache_memory_mib=64))
    server = GrpcServer(served, config=ServerConfig(audio=False)).start()
    yield server
    server.stop()


def test_a_failing_step_fails_only_the_requests_in_it(server) -> None:
    channel, stub = stub_for(server.target)
    try:
        long_request = chat_request("Count from one to one hundred in words.", 64)
        long_request.stopping.ignore_eos = True
        first_token, outcome = threading.Event(), {}

        def read_long() -> None:
            try:
                for _ in stub.Generate(long_request, timeout=120):
                    first_token.set()
                outcome["ended"] = "completed"
            except grpc.RpcError as error:
                outcome["ended"] = (error.code(), error_reason(error))
            first_token.set()

        reader = threading.Thread(target=read_long)
        reader.start()
        assert first_token.wait(timeout=60)
        faulty = _failure(stub, _seeded("Say hi.", STEP_SEED))  # scheduled beside the long stream's decode
        reader.join(timeout=120)
        assert faulty.code() == grpc.StatusCode.INTERNAL and error_reason(faulty) == "ENGINE_STEP_FAILED"
        assert "injected step fault" in faulty.details()
        assert outcome["ended"] == (grpc.StatusCode.INTERNAL, "ENGINE_STEP_FAILED")  # it was in that step
        wait_for_idle_pool(server.served.engine)  # their KV blocks are free
        later = generate(stub, chat_request("Say hello.", 4), timeout=60)
        assert later.last.finish_reason and len(later.token_ids) > 0
        assert _health(channel) == health_pb2.HealthCheckResponse.SERVING
    finally:
        channel.close()
    wait_for_idle_pool(server.served.engine)


def test_a_fault_in_the_loop_turns_health_not_serving(server) -> None:
    channel, stub = stub_for(server.target)
    try:
        failed = _failure(stub, _seeded("Say hi.", LOOP_SEED))
        assert failed.code() == grpc.StatusCode.INTERNAL and "injected loop fault" in failed.details()
        deadline = time.monotonic() + 10  # published on the server's loop once the engine thread has died
        while _health(channel) != health_pb2.HealthCheckResponse.NOT_SERVING and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _health(channel) == health_pb2.HealthCheckResponse.NOT_SERVING
        refused = _failure(stub, chat_request("Hello"))
        assert refused.code() == grpc.StatusCode.UNAVAILABLE and "reload the model" in refused.details()
    finally:
        channel.close()


def test_serve_exits_non_zero_when_its_engine_dies(smollm2_dir, tmp_path) -> None:
    served = start_serve(smollm2_dir, tmp_path / "serve.log", "--no-audio", env={**os.environ, FAULTS_ENV: FAULTS})
    try:
        channel, stub = stub_for(served.target)
        failed = _failure(stub, _seeded("Say hi.", LOOP_SEED))
        channel.close()
        assert failed.code() == grpc.StatusCode.INTERNAL
        assert served.process.wait(timeout=60) == EXIT_ENGINE_FAULT
        assert "exiting so that the process is restarted" in served.log()
    finally:
        served.stop()
