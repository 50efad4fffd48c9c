"""Two real server replicas (SmolLM2 on the CPU, small KV pools) behind the real Envoy with
deploy/envoy/front-proxy.yaml, and 64 concurrent streams through it:

- The REST listener (first: it needs no server replica booted again): two gateway replicas behind it answer
  over HTTP/1.1 and HTTP/2, and with one killed every new read and generation request succeeds, from the
  first one sent after the kill (no wait for Envoy's health check).
- SIGTERM one replica under load: zero failed requests (the replica drains its streams, Envoy sends it no new
  ones), and the replica exits 0.
- SIGKILL one replica: only the streams that replica was serving fail (UNAVAILABLE, or INTERNAL where Envoy
  resets a stream whose response had begun); the other's all complete, and every
  new request succeeds through the surviving replica.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from arbi_gateway.process import GatewayProcess

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as pb_grpc
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from arbi_client.readiness import is_serving
from tests.e2e.envoy_front_proxy import REPLICA_HEADER, FrontProxy, start_front_proxy
from tests.e2e.serve_process import ServeProcess, free_port, start_serve

STREAMS = 64
NEW_REQUESTS = 8
OUTPUT_TOKENS = 16
# 128 MiB of KV holds all of a replica's streams at once, so they run side by side rather than in turns.
_REPLICA_FLAGS = ("--kv-cache-memory-mib", "128", "--max-model-len", "256", "--no-audio", "--torch-threads", "1",
                  "--drain-timeout-ms", "120000")


@dataclass
class Fleet:
    """The server replicas (by port), the gateway replicas and the Envoy in front of them."""

    model_dir: Path
    scratch: Path
    replicas: dict[int, ServeProcess]
    gateways: dict[int, GatewayProcess]
    proxy: FrontProxy

    def restore(self) -> None:
        """Boots again, on its port, every replica a test stopped, and waits until Envoy routes to all."""
        for port, replica in list(self.replicas.items()):
            if replica.process.poll() is not None:
                self.replicas[port] = _start_replica(self.model_dir, self.scratch, port)
        self.proxy.wait_for_healthy("arbi_server", set(self.replicas))


def _start_replica(model_dir: Path, scratch: Path, port: int) -> ServeProcess:
    return start_serve(model_dir, scratch / f"replica-{port}.log", *_REPLICA_FLAGS, port=port)


@pytest.fixture(scope="module")
def fleet(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    scratch = tmp_path_factory.mktemp("replicas")
    ports = [free_port(), free_port()]
    with ThreadPoolExecutor(len(ports)) as boots:  # the two boots overlap
        replicas = dict(zip(ports, boots.map(lambda port: _start_replica(smollm2_dir, scratch, port), ports)))
    gateways: dict[int, GatewayProcess] = {}
    proxy: FrontProxy | None = None
    try:
        proxy = start_front_proxy(ports, [free_port(), free_port()], scratch)
        for index, port in enumerate(proxy.gateway_ports):
            gateways[port] = GatewayProcess.spawn(
                ["--upstream", proxy.grpc_target, "--http-port", str(port), "--upstream-metrics-url", ""],
                scratch / f"gateway-{index}.log")
        fleet = Fleet(smollm2_dir, scratch, replicas, gateways, proxy)
        proxy.wait_for_healthy("arbi_server", set(ports))
        yield fleet
    finally:
        for gateway in gateways.values():
            gateway.stop()
        if proxy is not None:
            proxy.stop()
        for replica in replicas.values():
            replica.stop()


@pytest.fixture
def fleet_up(fleet: Fleet) -> Fleet:
    fleet.restore()
    return fleet


def _request(index: int) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        chat=types_pb.ChatInput(messages=[types_pb.ChatMessage(role="user", content=f"Tell me fact {index}.")]),
        sampling=types_pb.SamplingParameters(temperature=0.0),
        stopping=types_pb.StoppingCriteria(max_output_tokens=OUTPUT_TOKENS, ignore_eos=True),
    )


@dataclass(frozen=True)
class StreamResult:
    replica_port: int | None  # None: no answer came back
    code: grpc.StatusCode
    token_count: int


class _Started:
    """The replica port of every stream that has its first answer, the streams that have ended, and an event
    once every stream has its first answer."""

    def __init__(self, count: int) -> None:
        self.ports: dict[int, int | None] = {}
        self.ended: set[int] = set()
        self.count = count
        self.all = asyncio.Event()

    def record(self, index: int, port: int | None) -> None:
        self.ports.setdefault(index, port)
        if len(self.ports) >= self.count:
            self.all.set()

    def busiest_replica(self) -> int | None:
        """The replica with the most streams still running (the first one's on a tie)."""
        running = [port for index, port in self.ports.items() if index not in self.ended and port is not None]
        return max(running, key=running.count) if running else None


async def _stream(stub: pb_grpc.GenerateServiceStub, index: int, started: _Started) -> StreamResult:
    call = stub.Generate(_request(index))
    port, token_count = None, 0
    try:
        async for response in call:
            if port is None:
                port = int(dict(await call.initial_metadata())[REPLICA_HEADER].rsplit(":", 1)[1])
                started.record(index, port)
            token_count += len(response.tokens)
        return StreamResult(port, grpc.StatusCode.OK, token_count)
    except grpc.aio.AioRpcError as error:
        started.record(index, port)
        return StreamResult(port, error.code(), token_count)
    finally:
        started.ended.add(index)


@dataclass(frozen=True)
class LoadOutcome:
    victim: int
    in_flight: list[StreamResult]
    new: list[StreamResult]


async def _signal_under_load(fleet: Fleet, stop: signal.Signals) -> LoadOutcome:
    """Starts STREAMS streams; once each has its first token, sends `stop` to the replica with the most of them
    still running, then NEW_REQUESTS new requests while the other replica's streams run: on SIGTERM once the
    replica itself reports NOT_SERVING (it drains and refuses new requests; Envoy's health check may not have
    seen it yet), on SIGKILL once the replica is dead and its streams are cut."""
    async with grpc.aio.insecure_channel(fleet.proxy.grpc_target) as channel:
        stub = pb_grpc.GenerateServiceStub(channel)
        started = _Started(STREAMS)
        tasks = [asyncio.create_task(_stream(stub, index, started)) for index in range(STREAMS)]
        await asyncio.wait_for(started.all.wait(), timeout=300)
        victim = started.busiest_replica()
        assert victim in fleet.replicas, "a replica still had streams running once every stream had begun"
        process = fleet.replicas[victim].process
        process.send_signal(stop)
        if stop == signal.SIGKILL:  # new requests are the ones sent once the replica is gone and its streams cut
            await asyncio.to_thread(process.wait, 30)
            await asyncio.gather(*(task for index, task in enumerate(tasks) if started.ports[index] == victim))
        else:  # a request sent before the replica reads the signal is admitted and served there, rightly
            await asyncio.to_thread(_wait_until_draining, fleet.replicas[victim])
        new = await asyncio.gather(*(_stream(stub, STREAMS + index, _Started(1)) for index in range(NEW_REQUESTS)))
        in_flight = await asyncio.gather(*tasks)
    return LoadOutcome(victim, list(in_flight), list(new))


def _wait_until_draining(replica: ServeProcess, timeout_s: float = 30) -> None:
    """Waits until the replica itself (not through Envoy) reports NOT_SERVING: it has begun its drain."""
    deadline = time.monotonic() + timeout_s
    while is_serving(replica.target):
        assert time.monotonic() < deadline, f"the replica did not begin its drain:\n{replica.log()[-3000:]}"
        time.sleep(0.02)


def _complete(result: StreamResult) -> bool:
    return result.code == grpc.StatusCode.OK and result.token_count == OUTPUT_TOKENS


def _curl(url: str, protocol: str, body: dict | None = None) -> tuple[int, str]:
    command = ["curl", "-sS", "--max-time", "120", protocol, "-w", "\n%{http_code}", url]
    if body is not None:
        command += ["-H", "content-type: application/json", "--data-binary", json.dumps(body)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=150, check=False)
    assert result.returncode == 0, result.stderr
    text, _, status = result.stdout.rpartition("\n")
    return int(status), text


def test_rest_replicas_answer_over_http1_and_http2_and_survive_a_killed_gateway(fleet_up: Fleet) -> None:
    proxy = fleet_up.proxy
    proxy.wait_for_healthy("arbi_gateway", set(fleet_up.gateways))
    url = f"http://127.0.0.1:{proxy.rest_port}"
    status, models = _curl(url + "/v1/models", "--http1.1")
    assert status == 200, models
    # ignore_eos: an unseeded sampled answer may end before its 4 tokens, which the count below would take for a fault.
    chat = {"model": json.loads(models)["data"][0]["id"], "max_tokens": 4, "ignore_eos": True,
            "messages": [{"role": "user", "content": "Hi"}]}
    for protocol in ("--http1.1", "--http2-prior-knowledge"):
        status, body = _curl(url + "/v1/chat/completions", protocol, chat)
        assert status == 200, body
        assert json.loads(body)["usage"]["completion_tokens"] == 4
    victim = next(iter(fleet_up.gateways))
    fleet_up.gateways[victim].process.kill()
    fleet_up.gateways[victim].process.wait(timeout=30)
    # At once: Envoy may still hold the dead replica healthy and keep pooled connections to it.
    answers = [_curl(url + "/v1/chat/completions", "--http1.1", chat) if index % 2 == 0
               else _curl(url + "/v1/models", "--http1.1") for index in range(8)]
    assert [status for status, _ in answers] == [200] * 8, answers


def test_sigterm_under_load_fails_no_request(fleet_up: Fleet) -> None:
    outcome = asyncio.run(_signal_under_load(fleet_up, signal.SIGTERM))
    served = {result.replica_port for result in outcome.in_flight}
    assert served == set(fleet_up.replicas), "both replicas served streams"
    failed = [result for result in outcome.in_flight + outcome.new if not _complete(result)]
    assert failed == []
    assert {result.replica_port for result in outcome.new} == set(fleet_up.replicas) - {outcome.victim}
    assert fleet_up.replicas[outcome.victim].process.wait(timeout=150) == 0


def test_sigkill_fails_only_the_killed_replicas_streams(fleet_up: Fleet) -> None:
    outcome = asyncio.run(_signal_under_load(fleet_up, signal.SIGKILL))
    on_victim = [result for result in outcome.in_flight if result.replica_port == outcome.victim]
    on_survivor = [result for result in outcome.in_flight if result.replica_port != outcome.victim]
    assert on_survivor and all(_complete(result) for result in on_survivor)
    cut = [result for result in on_victim if not _complete(result)]
    assert cut, "the killed replica had streams in flight"
    # Envoy resets a stream whose replica vanished after its response began: gRPC reads the reset as INTERNAL.
    assert {result.code for result in cut} <= {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL}
    assert [result for result in outcome.new if not _complete(result)] == []
    assert {result.replica_port for result in outcome.new} == set(fleet_up.replicas) - {outcome.victim}
