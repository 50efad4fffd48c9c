"""End-to-end fixtures: a client stub, a gateway and the OpenAI SDK on the session server, and a KV-leak check
after every test."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from tests.conftest import wait_for_idle_pool
from tests.e2e.helpers import stub_for


@pytest.fixture
def stub(served_smollm2) -> Iterator:
    channel, stub = stub_for(served_smollm2.target)
    yield stub
    channel.close()
    wait_for_idle_pool(served_smollm2.served.engine)


@pytest.fixture(scope="module")
def audio_stub(served_smollm2) -> Iterator:
    """An AudioService stub on the session server; the KV pool is checked once the module is done."""
    from arbi_client.arbi.v1 import audio_service_pb2_grpc

    channel = grpc.insecure_channel(served_smollm2.target)
    yield audio_service_pb2_grpc.AudioServiceStub(channel)
    channel.close()
    wait_for_idle_pool(served_smollm2.served.engine)


@pytest.fixture(scope="module")
def gateway(served_smollm2, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A gateway process for the module in front of the session server (modules needing other flags define their
    own)."""
    from arbi_gateway.process import GatewayProcess

    log_dir = tmp_path_factory.mktemp(f"gateway-{request.module.__name__.rsplit('.', 1)[-1]}")
    process = GatewayProcess.spawn(["--upstream", served_smollm2.target, "--http-port", "0"], log_dir / "gateway.log")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def model(served_smollm2) -> str:
    """The session server's model name."""
    return served_smollm2.served.name


@pytest.fixture
def client(gateway, served_smollm2) -> Iterator:
    """The official OpenAI SDK on the module's `gateway` in front of the session server; the KV pool is
    checked after each test."""
    import openai

    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0) as sdk:
        yield sdk
    wait_for_idle_pool(served_smollm2.served.engine)
