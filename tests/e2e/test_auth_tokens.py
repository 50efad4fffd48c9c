"""Bearer credentials: the admin token minted into an owner-only file, and the roles a real server grants
to no token, a wrong token, the generate token and the admin token."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from arbi_client.arbi.v1 import admin_service_pb2 as admin_pb
from arbi_client.arbi.v1 import admin_service_pb2_grpc as admin_grpc
from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as pb_grpc
from arbi_grpc.auth.credentials import Role, load_credentials
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.server_config import ServerConfig
from tests.e2e.helpers import chat_request, error_reason

GENERATE_TOKEN = "generate-token-0123456789"
ADMIN_TOKEN = "admin-token-0123456789abcdef"
WRONG_TOKEN = "not-a-token-0123456789"


def test_admin_token_is_minted_once_into_an_owner_only_file(tmp_path: Path) -> None:
    first = load_credentials(ServerConfig(), tmp_path)
    path = tmp_path / "admin-token"
    assert first.admin_token_path == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == first.admin_token and len(first.admin_token) >= 32
    assert load_credentials(ServerConfig(), tmp_path).admin_token == first.admin_token  # reused
    assert first.role_of(first.admin_token) is Role.ADMIN
    assert first.role_of(first.admin_token[:-1]) is None
    path.chmod(0o644)
    with pytest.raises(InvalidArgumentError, match="chmod 600"):
        load_credentials(ServerConfig(), tmp_path)
    custom = tmp_path / "elsewhere" / "token"
    other = load_credentials(ServerConfig(admin_token_file=str(custom)), tmp_path)
    assert other.admin_token_path == custom and other.admin_token != first.admin_token
    configured = load_credentials(ServerConfig(admin_token=ADMIN_TOKEN), tmp_path)
    assert configured.admin_token == ADMIN_TOKEN and configured.admin_token_path is None
    assert ADMIN_TOKEN not in repr(ServerConfig(admin_token=ADMIN_TOKEN, generate_token=GENERATE_TOKEN))


@pytest.fixture(scope="module")
def guarded_server(model_cache_dir: Path) -> Iterator:
    """A server that requires a generate token, with no model loaded (auth runs before any handler)."""
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.server import GrpcServer

    config = ServerConfig(generate_token=GENERATE_TOKEN, admin_token=ADMIN_TOKEN)
    server = GrpcServer(EngineConfig(), config=config).start()
    yield server
    server.stop()


def _metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


def _code_of(call, *args) -> tuple[grpc.StatusCode, str]:
    """The status code and ErrorInfo reason of `call(*args)` (OK and "" when it succeeds)."""
    try:
        call(*args)
    except grpc.RpcError as error:
        return error.code(), error_reason(error)
    return grpc.StatusCode.OK, ""


def test_generate_calls_need_the_generate_or_admin_token(guarded_server) -> None:
    with grpc.insecure_channel(guarded_server.target) as channel:
        stub = pb_grpc.GenerateServiceStub(channel)
        calls = {
            "Generate": lambda md: list(stub.Generate(chat_request("Hi"), metadata=md, timeout=30)),
            "Session": lambda md: list(stub.Session(iter([]), metadata=md, timeout=30)),
            "Tokenize": lambda md: stub.Tokenize(pb.TokenizeRequest(prompt="Hi"), metadata=md, timeout=30),
        }
        for name, call in calls.items():
            assert _code_of(call, ()) == (grpc.StatusCode.UNAUTHENTICATED, "MISSING_CREDENTIAL"), name
            assert _code_of(call, _metadata(WRONG_TOKEN)) == (
                grpc.StatusCode.UNAUTHENTICATED, "INVALID_CREDENTIAL"), name
        # With a valid token the call reaches its handler, which has no model to serve.
        for token in (GENERATE_TOKEN, ADMIN_TOKEN):
            assert _code_of(calls["Generate"], _metadata(token))[0] == grpc.StatusCode.UNAVAILABLE
            assert _code_of(calls["Tokenize"], _metadata(token))[0] == grpc.StatusCode.UNAVAILABLE
            assert _code_of(calls["Session"], _metadata(token))[0] == grpc.StatusCode.OK


def test_admin_calls_need_the_admin_token(guarded_server) -> None:
    with grpc.insecure_channel(guarded_server.target) as channel:
        admin = admin_grpc.AdminServiceStub(channel)

        def info(token: str | None):
            return admin.GetServerInfo(admin_pb.GetServerInfoRequest(), metadata=_metadata(token), timeout=30)

        assert _code_of(info, None) == (grpc.StatusCode.UNAUTHENTICATED, "MISSING_CREDENTIAL")
        assert _code_of(info, WRONG_TOKEN) == (grpc.StatusCode.UNAUTHENTICATED, "INVALID_CREDENTIAL")
        assert _code_of(info, GENERATE_TOKEN) == (
            grpc.StatusCode.PERMISSION_DENIED, "ADMIN_CREDENTIAL_REQUIRED")
        described = info(ADMIN_TOKEN)
        assert described.limits.generate_token_required
        assert not described.HasField("model")
        readiness = admin.CheckReadiness(admin_pb.CheckReadinessRequest(), metadata=_metadata(ADMIN_TOKEN))
        assert not readiness.ready and readiness.reason == "no model is resident"
        # Health stays open to probes without a credential and reports the missing model.
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
        assert health.status == health_pb2.HealthCheckResponse.NOT_SERVING


def test_the_default_server_needs_no_generate_token_but_guards_admin(served_smollm2) -> None:
    with grpc.insecure_channel(served_smollm2.target) as channel:
        admin = admin_grpc.AdminServiceStub(channel)
        code = _code_of(admin.CheckLiveness, admin_pb.CheckLivenessRequest())
        assert code == (grpc.StatusCode.UNAUTHENTICATED, "MISSING_CREDENTIAL")
        request = pb.CountTokensRequest(prompt="Hello world")
        counted = pb_grpc.GenerateServiceStub(channel).CountTokens(request)
        assert counted.token_count == 2
    token_file = served_smollm2.credentials.admin_token_path
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600


def test_audio_calls_need_the_generate_or_admin_token(guarded_server) -> None:
    from arbi_client.arbi.v1 import audio_service_pb2 as audio_pb
    from arbi_client.arbi.v1 import audio_service_pb2_grpc as audio_grpc

    with grpc.insecure_channel(guarded_server.target) as channel:
        stub = audio_grpc.AudioServiceStub(channel)

        def transcribe(metadata):
            return stub.Transcribe(audio_pb.TranscribeRequest(), metadata=metadata, timeout=30)

        assert _code_of(transcribe, ()) == (grpc.StatusCode.UNAUTHENTICATED, "MISSING_CREDENTIAL")
        # With a valid token the call reaches its handler, which refuses the empty audio.
        assert _code_of(transcribe, _metadata(GENERATE_TOKEN))[0] == grpc.StatusCode.INVALID_ARGUMENT


def test_embedding_calls_need_the_generate_token(guarded_server) -> None:
    from arbi_client.arbi.v1 import embedding_service_pb2 as embedding_pb
    from arbi_client.arbi.v1 import embedding_service_pb2_grpc as embedding_grpc

    with grpc.insecure_channel(guarded_server.target) as channel:
        stub = embedding_grpc.EmbeddingServiceStub(channel)

        def embed(metadata):
            return stub.Embed(embedding_pb.EmbedRequest(), metadata=metadata, timeout=30)

        assert _code_of(embed, ()) == (grpc.StatusCode.UNAUTHENTICATED, "MISSING_CREDENTIAL")
        # With a valid token the call reaches its handler, whose own answer (an empty request to a chat model that
        # embeds, on a server that may still be loading it) is not an authentication refusal.
        assert _code_of(embed, _metadata(GENERATE_TOKEN))[0] not in (grpc.StatusCode.UNAUTHENTICATED,
                                                                      grpc.StatusCode.PERMISSION_DENIED)
