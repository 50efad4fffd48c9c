"""Per-caller API keys on a real server with SmolLM2: a key's calls run as its tenant whatever the request's
tenant field says (tenant A cannot read tenant B's cached prefixes, and its usage counts as A's), keys grant no
AdminService unless marked admin, unknown keys are UNAUTHENTICATED, a tenant's stored files and batches are not
found by another, a rewritten keys file takes effect without a restart, and the official `openai` SDK's api_key
works through the gateway (a bad one gets 401)."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from pathlib import Path

import grpc
import openai
import pytest
from arbi_gateway.process import GatewayProcess

from arbi_client.arbi.v1 import admin_service_pb2 as admin_pb
from arbi_client.arbi.v1 import admin_service_pb2_grpc as admin_grpc
from arbi_client.arbi.v1 import batch_service_pb2 as batch_pb
from arbi_client.arbi.v1 import batch_service_pb2_grpc as batch_grpc
from arbi_client.arbi.v1 import file_service_pb2 as file_pb
from arbi_client.arbi.v1 import file_service_pb2_grpc as file_grpc
from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as pb_grpc
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from tests.conftest import wait_for_idle_pool
from tests.e2e.helpers import error_reason, generate, stub_for

KEY_A = "tenant-a-key-0123456789"
KEY_B = "tenant-b-key-0123456789"
KEY_OPS = "operator-key-0123456789"
KEY_NEW = "tenant-c-key-0123456789"


def _write_keys(path: Path, *entries: dict) -> None:
    """Replaces `path` atomically with `entries` as JSON lines (owner-only)."""
    staged = path.with_suffix(".staged")
    staged.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    staged.chmod(0o600)
    staged.replace(path)


BASE_KEYS = ({"key": KEY_A, "tenant": "tenant-a"},
             {"sha256": hashlib.sha256(KEY_B.encode()).hexdigest(), "tenant": "tenant-b"},
             {"key": KEY_OPS, "tenant": "ops", "admin": True})


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "api-keys.jsonl"
    _write_keys(path, *BASE_KEYS)
    return path


@pytest.fixture(scope="module")
def server(smollm2_dir, keys_file, tmp_path_factory):
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.served_model import build_served_model
    from arbi_grpc.server import GrpcServer
    from arbi_grpc.server_config import ServerConfig

    config = ServerConfig(audio=False, api_keys_file=str(keys_file), data_dir=str(tmp_path_factory.mktemp("data")))
    server = GrpcServer(build_served_model(EngineConfig(model=str(smollm2_dir), kv_cache_memory_mib=64)),
                        config=config).start()
    yield server
    server.stop()


@pytest.fixture
def channel(server):
    channel, _ = stub_for(server.target)
    yield channel
    channel.close()
    wait_for_idle_pool(server.served.engine)


def _auth(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


def _cached_tokens(channel, key: str, system: str, tenant_field: str = "") -> int:
    request = pb.GenerateRequest(
        chat=types_pb.ChatInput(messages=[types_pb.ChatMessage(role="system", content=system),
                                          types_pb.ChatMessage(role="user", content="Say hi.")]),
        sampling=types_pb.SamplingParameters(temperature=0.0),
        stopping=types_pb.StoppingCriteria(max_output_tokens=2),
        scheduling=types_pb.SchedulingOptions(tenant_id=tenant_field))
    completion = generate(pb_grpc.GenerateServiceStub(channel), request, metadata=_auth(key), timeout=60)
    return completion.last.usage.cached_prompt_token_count


def _code(call) -> tuple[grpc.StatusCode, str]:
    try:
        call()
    except grpc.RpcError as error:
        return error.code(), error_reason(error)
    return grpc.StatusCode.OK, ""


def _tenant_prompt_tokens(server, tenant: str) -> float:
    value = server.served.metrics.registry.get_sample_value("arbi_tenant_tokens_total",
                                                            {"tenant": tenant, "kind": "prompt"})
    return value or 0.0


def test_a_key_runs_as_its_tenant_whatever_the_request_says(server, channel) -> None:
    system = f"Session {uuid.uuid4().hex}. You are a careful assistant. " + " ".join(["Be brief."] * 20)
    assert _cached_tokens(channel, KEY_B, system) == 0  # tenant B caches the prefix
    usage_a, usage_b = _tenant_prompt_tokens(server, "tenant-a"), _tenant_prompt_tokens(server, "tenant-b")
    assert _cached_tokens(channel, KEY_A, system, tenant_field="tenant-b") == 0  # A claiming B gets nothing
    assert _tenant_prompt_tokens(server, "tenant-a") > usage_a  # and its usage is A's
    assert _tenant_prompt_tokens(server, "tenant-b") == usage_b
    assert _cached_tokens(channel, KEY_B, system) > 0  # B's entry is still there, and B's own
    assert _cached_tokens(channel, KEY_A, system) > 0  # A's first call cached under A


def test_keys_grant_admin_only_when_marked(channel) -> None:
    admin = admin_grpc.AdminServiceStub(channel)
    flush = admin_pb.FlushPrefixCacheRequest(tenant_id="tenant-b")
    report = admin_pb.GetMemoryReportRequest()
    for call in (lambda key: admin.FlushPrefixCache(flush, metadata=_auth(key), timeout=30),
                 lambda key: admin.GetMemoryReport(report, metadata=_auth(key), timeout=30)):
        assert _code(lambda: call(KEY_A)) == (grpc.StatusCode.PERMISSION_DENIED, "ADMIN_CREDENTIAL_REQUIRED")
        assert _code(lambda: call("unknown-key-0123456789")) == (grpc.StatusCode.UNAUTHENTICATED,
                                                                 "INVALID_CREDENTIAL")
        assert _code(lambda: call(KEY_OPS)) == (grpc.StatusCode.OK, "")
    stub = pb_grpc.GenerateServiceStub(channel)
    count = pb.CountTokensRequest(prompt="Hello world")
    assert _code(lambda: stub.CountTokens(count, timeout=30)) == (grpc.StatusCode.UNAUTHENTICATED,
                                                                  "MISSING_CREDENTIAL")
    assert _code(lambda: stub.CountTokens(count, metadata=_auth("unknown-key-0123456789"), timeout=30)) == (
        grpc.StatusCode.UNAUTHENTICATED, "INVALID_CREDENTIAL")


def test_a_rewritten_keys_file_takes_effect_without_restart(channel, keys_file) -> None:
    stub = pb_grpc.GenerateServiceStub(channel)
    count = pb.CountTokensRequest(prompt="Hello world")

    def code_with(key: str) -> grpc.StatusCode:
        return _code(lambda: stub.CountTokens(count, metadata=_auth(key), timeout=30))[0]

    def eventually(key: str, expected: grpc.StatusCode) -> None:
        deadline = time.monotonic() + 10
        while code_with(key) != expected and time.monotonic() < deadline:
            time.sleep(0.2)
        assert code_with(key) == expected

    assert code_with(KEY_NEW) == grpc.StatusCode.UNAUTHENTICATED
    try:
        _write_keys(keys_file, *BASE_KEYS, {"key": KEY_NEW, "tenant": "tenant-c"})
        eventually(KEY_NEW, grpc.StatusCode.OK)
        keys_file.write_text('{"key": "broken')  # a broken file keeps the keys in use
        time.sleep(1.5)
        assert code_with(KEY_NEW) == grpc.StatusCode.OK and code_with(KEY_A) == grpc.StatusCode.OK
        _write_keys(keys_file, *BASE_KEYS)
        eventually(KEY_NEW, grpc.StatusCode.UNAUTHENTICATED)
    finally:
        _write_keys(keys_file, *BASE_KEYS)


def test_the_openai_sdk_api_key_through_the_gateway(server, tmp_path) -> None:
    gateway = GatewayProcess.spawn(["--upstream", server.target, "--http-port", "0"], tmp_path / "gateway.log")
    try:
        model = server.served.name
        messages = [{"role": "user", "content": "Say hi."}]
        with openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY_A, max_retries=0) as sdk:
            # ignore_eos: an unseeded sampled answer may end before its 2 tokens, which the count would take for a fault
            reply = sdk.chat.completions.create(model=model, messages=messages, max_tokens=2, user="tenant-b",
                                                extra_body={"ignore_eos": True})
            assert reply.usage.completion_tokens == 2
        with openai.OpenAI(base_url=gateway.url + "/v1", api_key="unknown-key-0123456789", max_retries=0) as sdk:
            with pytest.raises(openai.AuthenticationError) as refused:
                sdk.chat.completions.create(model=model, messages=messages, max_tokens=2)
            assert refused.value.status_code == 401
            assert "unknown-key-0123456789" not in gateway.log_path.read_text()
    finally:
        gateway.stop()
    wait_for_idle_pool(server.served.engine)


def test_a_tenants_files_and_batches_are_invisible_to_another(channel) -> None:
    files = file_grpc.FileServiceStub(channel)
    batches = batch_grpc.BatchServiceStub(channel)
    line = json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}})
    upload = iter([file_pb.UploadFileRequest(metadata=file_pb.UploadFileMetadata(filename="a.jsonl", purpose="batch")),
                   file_pb.UploadFileRequest(chunk=line.encode() + b"\n")])
    stored = files.UploadFile(upload, metadata=_auth(KEY_A), timeout=30).file
    listed = files.ListFiles(file_pb.ListFilesRequest(), metadata=_auth(KEY_A), timeout=30)
    assert stored.id in [entry.id for entry in listed.files]
    assert files.GetFile(file_pb.GetFileRequest(file_id=stored.id), metadata=_auth(KEY_A), timeout=30).file == stored
    listed = files.ListFiles(file_pb.ListFilesRequest(), metadata=_auth(KEY_B), timeout=30)
    assert stored.id not in [entry.id for entry in listed.files]
    for call in (lambda: files.GetFile(file_pb.GetFileRequest(file_id=stored.id), metadata=_auth(KEY_B), timeout=30),
                 lambda: list(files.GetFileContent(file_pb.GetFileContentRequest(file_id=stored.id),
                                                   metadata=_auth(KEY_B), timeout=30)),
                 lambda: files.DeleteFile(file_pb.DeleteFileRequest(file_id=stored.id), metadata=_auth(KEY_B),
                                          timeout=30),
                 lambda: batches.CreateBatch(batch_pb.CreateBatchRequest(
                     input_file_id=stored.id, endpoint="/v1/chat/completions", completion_window="24h"),
                     metadata=_auth(KEY_B), timeout=30)):
        assert _code(call)[0] == grpc.StatusCode.NOT_FOUND
    files.DeleteFile(file_pb.DeleteFileRequest(file_id=stored.id), metadata=_auth(KEY_A), timeout=30)
