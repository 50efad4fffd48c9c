"""Model lifecycle through AdminService on a server of its own: switch under load with a drain (streams
finish or end UNAVAILABLE, none hangs), a failed load that keeps the old model serving, unload and load.

The second model is the imported SmolLM2 under another name (a directory of links to its files)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from arbi_client import ArbiClient
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from arbi_grpc.errors import UnavailableError
from tests.conftest import wait_for_idle_pool
from tests.e2e.helpers import chat_request, generate, stub_for

QUESTION = "What is the capital of France?"
SHORT_TOKENS = 8
LONG_TOKENS = 1200  # far more decode steps than the load and the drain below take


@pytest.fixture(scope="module")
def smollm2_copy(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("models") / "SmolLM2-copy"
    copy.mkdir()
    for item in smollm2_dir.iterdir():
        (copy / item.name).symlink_to(item)
    return copy


@pytest.fixture(scope="module")
def switch_server(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.served_model import build_served_model
    from arbi_grpc.server import GrpcServer
    from arbi_grpc.server_config import ServerConfig

    config = EngineConfig(model=str(smollm2_dir), kv_cache_memory_mib=64, max_waiting_requests=16)
    # The test's model copies live in pytest's temporary directories: the model roots admit them.
    roots = ServerConfig(model_roots=str(tmp_path_factory.getbasetemp()))
    server = GrpcServer(build_served_model(config), config=roots).start()
    yield server
    server.stop()


@pytest.fixture
def admin(switch_server) -> Iterator[ArbiClient]:
    with ArbiClient(switch_server.target, admin_token=switch_server.credentials.admin_token) as client:
        yield client


@dataclass
class StreamResult:
    """What one Generate stream received and how it ended."""

    responses: list = field(default_factory=list)
    code: grpc.StatusCode | None = None
    details: str = ""
    started: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


def _stream(stub, request, result: StreamResult) -> None:
    try:
        for response in stub.Generate(request, timeout=300):
            result.responses.append(response)
            result.started.set()
        result.code = grpc.StatusCode.OK
    except grpc.RpcError as error:
        result.code, result.details = error.code(), error.details()
    finally:
        result.started.set()
        result.done.set()


def test_switch_under_load_drains_then_ends_the_rest(switch_server, admin: ArbiClient, smollm2_copy) -> None:
    old = switch_server.served
    channel, stub = stub_for(switch_server.target)
    reference = generate(stub, chat_request(QUESTION, max_output_tokens=SHORT_TOKENS))
    short = chat_request(QUESTION, max_output_tokens=SHORT_TOKENS)
    long = chat_request("Tell me a very long story.", max_output_tokens=LONG_TOKENS)
    long.stopping.ignore_eos = True
    results = {name: StreamResult() for name in ("short-1", "short-2", "long-1", "long-2")}
    threads = [
        threading.Thread(target=_stream, args=(stub, short if name.startswith("short") else long, result))
        for name, result in results.items()
    ]
    for thread in threads:
        thread.start()
    for result in results.values():
        assert result.started.wait(120)

    switched = admin.switch_model(str(smollm2_copy), drain_timeout_ms=5000)
    for thread in threads:
        thread.join(timeout=120)
    assert all(result.done.is_set() for result in results.values()), "a stream hangs after the switch"

    assert switched.previous_model == old.name
    assert switched.model.name == "SmolLM2-copy"
    for name in ("short-1", "short-2"):
        assert results[name].code == grpc.StatusCode.OK, results[name].details
        assert [t.token_id for r in results[name].responses for t in r.tokens] == reference.token_ids
    for name in ("long-1", "long-2"):
        assert results[name].code == grpc.StatusCode.UNAVAILABLE
        assert "switched" in results[name].details
        assert results[name].responses[-1].finish_reason == types_pb.FINISH_REASON_UNSPECIFIED
    assert switched.ended_request_count == 2

    assert switch_server.served.name == "SmolLM2-copy"
    assert admin.get_server_info().model.name == "SmolLM2-copy"
    after = generate(stub, chat_request(QUESTION, max_output_tokens=SHORT_TOKENS))
    assert after.token_ids == reference.token_ids
    with pytest.raises(grpc.RpcError) as gone:
        request = chat_request(QUESTION, max_output_tokens=2)
        request.model = old.name
        generate(stub, request)
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(UnavailableError):  # the old engine is shut down
        old.engine.call(lambda: None).result(timeout=5)
    wait_for_idle_pool(switch_server.served.engine)
    channel.close()


def test_failed_switch_keeps_the_old_model_serving(switch_server, admin: ArbiClient, tmp_path: Path) -> None:
    before = admin.get_server_info().model
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    for spec, code in ((str(tmp_path / "no-such-model"), grpc.StatusCode.NOT_FOUND),
                       (str(broken), grpc.StatusCode.DATA_LOSS)):
        with pytest.raises(grpc.RpcError) as failed:
            admin.switch_model(spec)
        assert failed.value.code() == code, failed.value.details()
        assert admin.get_server_info().model == before
        assert admin.check_readiness().ready
    channel, stub = stub_for(switch_server.target)
    assert "Paris" in generate(stub, chat_request(QUESTION, max_output_tokens=SHORT_TOKENS)).text
    channel.close()


def test_unload_then_load(switch_server, admin: ArbiClient, smollm2_dir: Path, imported_smollm2) -> None:
    channel, stub = stub_for(switch_server.target)
    resident_name = switch_server.served.name
    with pytest.raises(grpc.RpcError) as resident:  # a second model of a resident name
        admin.load_model(f"{resident_name}={smollm2_dir}")
    assert resident.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"model {resident_name!r} is resident" in resident.value.details()
    unloaded = admin.unload_model(drain_timeout_ms=1000)
    assert unloaded.ended_request_count == 0
    assert not admin.check_readiness().ready
    assert not admin.get_server_info().HasField("model")
    for call in (lambda: generate(stub, chat_request(QUESTION, max_output_tokens=2)),
                 admin.get_memory_report, admin.unload_model):
        with pytest.raises(grpc.RpcError) as refused:
            call()
        assert refused.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION)
    loaded = admin.load_model(str(smollm2_dir))
    assert loaded.name == imported_smollm2.name
    assert admin.check_readiness().ready
    assert "Paris" in generate(stub, chat_request(QUESTION, max_output_tokens=SHORT_TOKENS)).text
    channel.close()
