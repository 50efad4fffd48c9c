"""A flood of three times the admission capacity (max_running_requests + max_waiting_requests) of Generate
streams on one channel of the Python client: every stream is served or refused with RESOURCE_EXHAUSTED
naming the limit, never UNAVAILABLE from HTTP/2; the KV pool is fully free afterwards and the next request
answers correctly. Once with the derived stream limit (the flood reaches admission), once with a stream
limit between the capacity and the flood (HTTP/2 refuses the streams over it, and the client's retry policy
sends them again). Each server takes two floods on one channel: before and after the client has read the
server's HTTP/2 settings.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from arbi_client import ArbiClient
from arbi_client.aio import AsyncArbiClient
from arbi_client.requests import chat_request
from arbi_grpc.config import EngineConfig
from arbi_grpc.served_model import build_served_model
from arbi_grpc.server import GrpcServer
from arbi_grpc.server_config import ServerConfig
from tests.conftest import wait_for_idle_pool

MAX_RUNNING, MAX_WAITING = 4, 12
CAPACITY = MAX_RUNNING + MAX_WAITING
FLOOD = 3 * CAPACITY
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module", params=[0, 2 * CAPACITY], ids=["derived-stream-limit", "stream-limit-below-flood"])
def server(request: pytest.FixtureRequest, smollm2_dir: Path) -> Iterator[GrpcServer]:
    config = EngineConfig(model=str(smollm2_dir), kv_cache_memory_mib=64, max_running_requests=MAX_RUNNING,
                          max_waiting_requests=MAX_WAITING)
    server = GrpcServer(build_served_model(config), config=ServerConfig(max_concurrent_streams=request.param))
    server.start()
    yield server
    server.stop()


async def _floods(target: str, count: int) -> list[grpc.StatusCode]:
    """`count` floods of FLOOD generations started at once on one channel; each ends OK or with its code."""
    async with AsyncArbiClient(target) as client:

        async def one(index: int) -> grpc.StatusCode:
            request = chat_request([{"role": "user", "content": f"{QUESTION} ({index})"}], max_output_tokens=4,
                                   temperature=0.0)
            try:
                async for _ in client.generate(request):
                    pass
            except grpc.aio.AioRpcError as error:
                assert error.code() is not grpc.StatusCode.RESOURCE_EXHAUSTED or \
                    "max_waiting_requests" in error.details(), error.details()
                return error.code()
            return grpc.StatusCode.OK

        outcomes = []
        for _ in range(count):
            outcomes += await asyncio.gather(*(one(index) for index in range(FLOOD)))
        return outcomes


def test_flood_is_served_or_refused_by_admission(server: GrpcServer) -> None:
    codes = Counter(asyncio.run(_floods(server.target, count=2)))
    assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}, codes
    assert codes[grpc.StatusCode.OK] >= 2 * MAX_WAITING, codes  # each flood fills the waiting queue at least
    wait_for_idle_pool(server.served.engine)
    with ArbiClient(server.target) as client:
        reply = "".join(client.stream_chat([{"role": "user", "content": QUESTION}], max_output_tokens=16,
                                           temperature=0.0))
    assert "Paris" in reply
