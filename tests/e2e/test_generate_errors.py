"""Bad input gets the right gRPC status and a precise message, and leaks nothing (checked by the
`stub` fixture after each test); cancellation and deadlines free KV blocks at once."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from tests.conftest import wait_for_idle_pool
from tests.e2e.helpers import chat_request, generate, stub_for


def _error_of(stub, request: pb.GenerateRequest) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        generate(stub, request)
    return raised.value


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.ClearField("chat") or setattr(r, "prompt", ""), "prompt"),
        (lambda r: r.ClearField("chat"), "input"),
        (lambda r: r.chat.ClearField("messages"), "messages"),
        (lambda r: setattr(r.stopping, "max_output_tokens", 0), "max_output_tokens"),
        (lambda r: setattr(r.stopping, "max_output_tokens", -3), "max_output_tokens"),
        (lambda r: setattr(r.sampling, "temperature", -0.5), "temperature"),
        (lambda r: setattr(r.sampling, "top_p", 0.0), "top_p"),
        (lambda r: setattr(r.sampling, "top_p", 1.5), "top_p"),
        (lambda r: r.stopping.stop_token_ids.append(10**6), "stop_token_ids"),
        (lambda r: r.ClearField("chat") or r.token_ids.ids.extend([1, -5]), "token_ids"),
    ],
)
def test_invalid_argument_names_the_field(stub, mutate, field) -> None:
    request = chat_request("What is the capital of France?")
    mutate(request)
    error = _error_of(stub, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in error.details()


def test_prompt_longer_than_context(stub, served_smollm2) -> None:
    limit = served_smollm2.served.max_model_len
    request = pb.GenerateRequest(token_ids=types_pb.TokenIds(ids=[42] * (limit + 10)))
    error = _error_of(stub, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert str(limit) in error.details()


def test_unknown_model_is_not_found(stub) -> None:
    request = chat_request("hello")
    request.model = "no-such-model"
    error = _error_of(stub, request)
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert "no-such-model" in error.details()


def test_other_requests_unaffected_by_bad_ones(stub) -> None:
    good = chat_request("What is the capital of France?")
    bad = chat_request("x")
    bad.sampling.temperature = -1.0
    results: dict[str, object] = {}

    def run_good() -> None:
        results["good"] = generate(stub, good)

    thread = threading.Thread(target=run_good)
    thread.start()
    for _ in range(5):
        assert _error_of(stub, bad).code() == grpc.StatusCode.INVALID_ARGUMENT
    thread.join()
    assert "Paris" in results["good"].text


def test_cancelled_stream_frees_its_blocks(stub, served_smollm2) -> None:
    engine = served_smollm2.served.engine
    request = chat_request("Write a very long essay about the history of Europe.", max_output_tokens=1000)
    call = stub.Generate(request)
    received = 0
    for _ in call:
        received += 1
        if received == 3:
            assert engine.stats().num_free_blocks < engine.stats().num_total_blocks
            call.cancel()
            break
    wait_for_idle_pool(engine, timeout_s=5.0)


def test_deadline_stops_the_request(stub, served_smollm2) -> None:
    request = chat_request("Write a very long essay about the history of Europe.", max_output_tokens=1000)
    request.stopping.ignore_eos = True
    started = time.monotonic()
    error = _error_of_call(stub, request, timeout=1.0)
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - started < 10.0
    wait_for_idle_pool(served_smollm2.served.engine, timeout_s=5.0)


def _error_of_call(stub, request, **call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        generate(stub, request, **call)
    return raised.value


@pytest.fixture(scope="module")
def tiny_queue_server(smollm2_dir):
    """A second server that runs one request at a time and queues at most one more."""
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.served_model import build_served_model
    from arbi_grpc.server import GrpcServer

    config = EngineConfig(model=str(smollm2_dir), kv_cache_memory_mib=64,
                          max_running_requests=1, max_waiting_requests=1)
    server = GrpcServer(build_served_model(config)).start()
    yield server
    server.stop()


def test_full_queue_is_resource_exhausted(tiny_queue_server) -> None:
    channel, stub = stub_for(tiny_queue_server.target)
    engine = tiny_queue_server.served.engine
    long_request = chat_request("Write a long story.", max_output_tokens=400)
    long_request.stopping.ignore_eos = True
    running = stub.Generate(long_request)
    next(running)  # admitted and running
    waiting = stub.Generate(long_request)
    deadline = time.monotonic() + 10
    while engine.stats().num_waiting < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    error = _error_of(stub, chat_request("What is the capital of France?"))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "queue is full" in error.details()
    running.cancel()
    waiting.cancel()
    wait_for_idle_pool(engine)
    assert "Paris" in generate(stub, chat_request("What is the capital of France?")).text
    channel.close()
    wait_for_idle_pool(engine)
