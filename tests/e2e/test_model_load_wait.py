"""Requests for a model that is still loading wait for it, bounded by --model-load-wait-ms: past the bound they fail
UNAVAILABLE naming the load and the bound (never hang); a request sent during the load that the load's end
overtakes is answered. The load is held open by a loader that waits on a gate before handing over SmolLM2 (built
beforehand), so the timing does not depend on how fast a model loads here."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from arbi_client.arbi.v1 import embedding_service_pb2 as embedding_pb
from arbi_client.arbi.v1 import embedding_service_pb2_grpc as embedding_grpc
from arbi_client.arbi.v1 import embedding_types_pb2 as embedding_types
from arbi_grpc.config import EngineConfig
from arbi_grpc.served_model import build_served_model
from arbi_grpc.server import GrpcServer
from arbi_grpc.server_config import ServerConfig
from tests.conftest import wait_for_idle_pool
from tests.e2e.helpers import chat_request, generate, stub_for

WAIT_S = 1.5


@pytest.fixture(scope="module")
def loading_server(smollm2_dir: Path) -> Iterator[tuple[GrpcServer, threading.Event, threading.Thread]]:
    config = EngineConfig(model=f"chat={smollm2_dir}", kv_cache_memory_mib=32)
    prebuilt = build_served_model(config)
    gate = threading.Event()

    def gated_loader(_config, _placement):
        if not gate.wait(timeout=120):
            raise TimeoutError("the test never opened the gate")
        return prebuilt

    server = GrpcServer(config, config=ServerConfig(audio=False, model_load_wait_ms=int(WAIT_S * 1000)),
                        loader=gated_loader).start()
    load = threading.Thread(target=server.load_model, args=(config.model,))
    load.start()
    deadline = time.monotonic() + 30
    while not server.host.readiness()[1].startswith("loading") and time.monotonic() < deadline:
        time.sleep(0.01)
    yield server, gate, load
    gate.set()
    load.join()
    server.stop()


def _embed(target: str, model: str) -> embedding_pb.EmbedResponse:
    with grpc.insecure_channel(target) as channel:
        return embedding_grpc.EmbeddingServiceStub(channel).Embed(
            embedding_pb.EmbedRequest(model=model, inputs=[embedding_types.EmbeddingInput(text="hello")]), timeout=60)


def _named(model: str, question: str):
    request = chat_request(question, max_output_tokens=4)
    request.model = model
    return request


def test_requests_wait_for_the_load_then_fail_unavailable_past_the_bound(loading_server, smollm2_dir: Path) -> None:
    server, gate, load = loading_server
    expected = (f"model 'chat' is still loading (loading 'chat={smollm2_dir}') after waiting {WAIT_S:g} s "
                "(--model-load-wait-ms); retry later")
    channel, stub = stub_for(server.target)
    with channel:
        # The default model (empty name) while none is resident waits for the first load, as the named one does.
        for call in (lambda: generate(stub, _named("", "Hi"), timeout=60), lambda: _embed(server.target, "chat")):
            started = time.monotonic()
            with pytest.raises(grpc.RpcError) as refused:
                call()
            assert WAIT_S <= time.monotonic() - started < WAIT_S + 10
            assert (refused.value.code(), refused.value.details()) == (grpc.StatusCode.UNAVAILABLE, expected)

        with ThreadPoolExecutor(max_workers=2) as pool:
            started = time.monotonic()
            chat = pool.submit(generate, stub, _named("chat", "Say hi."), timeout=60)
            embedded = pool.submit(_embed, server.target, "")
            time.sleep(0.3)
            assert not chat.done() and not embedded.done()  # waiting, neither answered nor refused
            gate.set()
            assert chat.result().token_ids and len(embedded.result().embeddings[0].values) == 576
            assert time.monotonic() - started < WAIT_S + 10
        load.join()
        assert generate(stub, _named("chat", "Say hi.")).token_ids == chat.result().token_ids
    wait_for_idle_pool(server.served.engine)
