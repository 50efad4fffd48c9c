"""AdminService on the shared real server, through the typed Python client: description, health, models,
memory, running requests, runtime settings, drain and resume."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from arbi_client import ArbiClient
from arbi_client.arbi.v1 import admin_service_pb2 as admin_pb
from arbi_client.arbi.v1 import admin_service_pb2_grpc
from arbi_client.arbi.v1 import admin_types_pb2 as admin_types
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from arbi_grpc import __version__
from tests.conftest import wait_for_idle_pool
from tests.e2e.helpers import chat_request, generate


@pytest.fixture
def admin(served_smollm2) -> Iterator[ArbiClient]:
    with ArbiClient(served_smollm2.target, admin_token=served_smollm2.credentials.admin_token) as client:
        yield client
    wait_for_idle_pool(served_smollm2.served.engine)


def _health(target: str, service: str = "") -> int:
    with grpc.insecure_channel(target) as channel:
        request = health_pb2.HealthCheckRequest(service=service)
        return health_pb2_grpc.HealthStub(channel).Check(request).status


def _bad_request_fields(error: grpc.RpcError) -> list[str]:
    status = rpc_status.from_call(error)
    fields = []
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            fields += [violation.field for violation in bad_request.field_violations]
    return fields


def test_server_info_liveness_readiness_models_memory(admin: ArbiClient, served_smollm2) -> None:
    info = admin.get_server_info()
    served = served_smollm2.served
    assert info.version == __version__
    assert (info.backend, info.device, info.dtype, info.kv_codec) == ("torch", "cpu", "float32", "none")
    assert info.model.name == served.name
    assert info.model.architecture == "LlamaForCausalLM"
    assert info.model.parameter_count == 134_515_008  # SmolLM2-135M, tied embeddings counted once
    assert info.model.max_context_tokens == served.max_model_len
    assert info.limits.runtime.max_waiting_requests == served.config.max_waiting_requests
    assert info.limits.max_session_generations > 0 and not info.limits.generate_token_required
    assert admin.check_liveness().uptime_ms > 0
    assert admin.check_readiness().ready
    models = admin.list_models()
    assert models[0].name == served.name and models[0].resident
    assert any(m.name == "SmolLM2-135M-Instruct" and m.cached and m.size_bytes > 0 for m in models)

    memory = admin.get_memory_report()
    stats = served.engine.stats()
    assert memory.kv_block_count == stats.num_total_blocks
    assert memory.kv_used_block_count == 0 and memory.kv_free_block_count == memory.kv_block_count
    assert memory.kv_block_tokens == served.config.block_size
    # 30 layers x (K and V) x 3 KV heads x 64 dims x 16 tokens x 4 bytes
    assert memory.kv_block_bytes == 30 * 2 * 3 * 64 * 16 * 4
    assert memory.kv_cache_bytes == memory.kv_block_count * memory.kv_block_bytes
    # `--cpu-weights auto` holds the GGUF import as stored: 210 layer matrices Q4_1 (0.625 bytes a weight), the tied
    # embedding Q8_0 (1.0625 bytes a weight), the norms in float32.
    assert memory.weight_bytes == 106_168_320 * 5 // 8 + 28_311_552 * 17 // 16 + 35_136 * 4 == 96_576_768


def test_list_and_cancel_a_running_request(admin: ArbiClient, stub) -> None:
    request = chat_request("Tell me a very long story about the sea.", max_output_tokens=400)
    request.stopping.ignore_eos = True
    responses = stub.Generate(request, timeout=120)
    first = next(responses)
    listed = admin.list_running_requests()
    mine = [r for r in listed if r.request_id == first.request_id]
    assert len(mine) == 1
    assert mine[0].state in (admin_types.REQUEST_STATE_RUNNING, admin_types.REQUEST_STATE_WAITING)
    assert mine[0].prompt_token_count > 5 and mine[0].kv_block_count > 0
    admin.cancel_running_request(first.request_id)
    rest = list(responses)
    assert rest[-1].finish_reason == types_pb.FINISH_REASON_CANCELLED
    generated = sum(len(r.tokens) for r in [first, *rest])
    assert rest[-1].usage.output_token_count == generated < 400
    with pytest.raises(grpc.RpcError) as missing:
        admin.cancel_running_request(first.request_id)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


def test_runtime_config_is_validated_and_applied(admin: ArbiClient, stub, served_smollm2) -> None:
    before = admin.get_runtime_config()
    try:
        updated = admin.update_runtime_config(default_max_output_tokens=3, max_step_tokens=128)
        assert (updated.default_max_output_tokens, updated.max_step_tokens) == (3, 128)
        assert updated.max_running_requests == before.max_running_requests
        assert served_smollm2.served.engine.scheduler.limits.max_step_tokens == 128
        unbounded = chat_request("Count from 1 to 50.")
        unbounded.stopping.ClearField("max_output_tokens")
        assert len(generate(stub, unbounded).token_ids) == 3  # the new default applies
    finally:
        admin.update_runtime_config(default_max_output_tokens=before.default_max_output_tokens,
                                    max_step_tokens=before.max_step_tokens)
    assert admin.get_runtime_config() == before

    raw = admin_pb.UpdateRuntimeConfigRequest
    cases = {
        "unknown key": (raw(update_mask={"paths": ["max_step_tokens", "kv_cache_memory_mib"]},
                            config={"max_step_tokens": 64}), ["update_mask.paths"]),
        "out of range": (raw(update_mask={"paths": ["max_step_tokens", "max_running_requests"]},
                             config={"max_step_tokens": 0, "max_running_requests": -2}),
                         ["config.max_step_tokens", "config.max_running_requests"]),
        "empty mask": (raw(config={"max_step_tokens": 64}), ["update_mask"]),
    }
    metadata = (("authorization", f"Bearer {served_smollm2.credentials.admin_token}"),)
    with grpc.insecure_channel(served_smollm2.target) as channel:
        stub_admin = admin_service_pb2_grpc.AdminServiceStub(channel)
        for name, (request, fields) in cases.items():
            with pytest.raises(grpc.RpcError) as refused:
                stub_admin.UpdateRuntimeConfig(request, metadata=metadata)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
            assert _bad_request_fields(refused.value) == fields, name
    with pytest.raises(grpc.RpcError) as beyond:
        admin.update_runtime_config(max_running_requests=before.max_running_requests + 1)
    assert beyond.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "--max-running-requests" in beyond.value.details()
    assert admin.get_runtime_config() == before  # refused updates change nothing


def test_drain_refuses_new_requests_lets_in_flight_finish_then_resume(admin: ArbiClient, stub,
                                                                      served_smollm2) -> None:
    target = served_smollm2.target
    assert _health(target) == health_pb2.HealthCheckResponse.SERVING
    request = chat_request("Write a long poem about rain.", max_output_tokens=48)
    request.stopping.ignore_eos = True
    responses = stub.Generate(request, timeout=120)
    next(responses)
    in_flight: list = []
    reader = threading.Thread(target=lambda: in_flight.extend(responses))
    reader.start()
    try:
        remaining = admin.drain_server(timeout_ms=0)
        assert remaining == 1
        assert not admin.check_readiness().ready
        assert _health(target) == health_pb2.HealthCheckResponse.NOT_SERVING
        assert _health(target, "arbi.v1.GenerateService") == health_pb2.HealthCheckResponse.NOT_SERVING
        with pytest.raises(grpc.RpcError) as refused:
            generate(stub, chat_request("Hi", max_output_tokens=2))
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert admin.drain_server(timeout_ms=60_000) == 0  # waits for the stream in flight
        reader.join(timeout=60)
        assert in_flight[-1].finish_reason == types_pb.FINISH_REASON_MAX_OUTPUT_TOKENS
    finally:
        admin.resume_server()
        reader.join(timeout=60)
    assert admin.check_readiness().ready
    assert _health(target) == health_pb2.HealthCheckResponse.SERVING
    assert len(generate(stub, chat_request("Hi", max_output_tokens=2)).token_ids) == 2
