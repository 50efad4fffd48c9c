"""SIGTERM on a real `arbi-serve serve` process under load: health turns NOT_SERVING, new requests are refused
with UNAVAILABLE (reason DRAINING), every stream in flight completes, and the process exits 0; a second signal
during the drain exits at once with 128 + the signal's number."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from arbi_client.arbi.v1 import generate_service_pb2_grpc as pb_grpc
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from tests.e2e.helpers import chat_request, error_reason
from tests.e2e.serve_process import ServeProcess, start_serve

STREAMS = 4
OUTPUT_TOKENS = 64
EXIT_WAIT_S = 120
DRAIN_TIMEOUT_MS = "120000"  # far longer than the streams need: the drain ends when they do


class _Streams:
    """`STREAMS` Generate streams on one channel, each read to its end on a thread of its own."""

    def __init__(self, target: str, output_tokens: int) -> None:
        self.channel = grpc.insecure_channel(target)
        stub = pb_grpc.GenerateServiceStub(self.channel)
        self.started = threading.Barrier(STREAMS + 1)
        self.results: list[tuple[int, types_pb.FinishReason | grpc.StatusCode]] = []
        request = chat_request("Count from one to one hundred in words.", output_tokens)
        request.stopping.ignore_eos = True
        self.threads = [threading.Thread(target=self._read, args=(stub, request)) for _ in range(STREAMS)]
        for thread in self.threads:
            thread.start()
        self.started.wait(timeout=EXIT_WAIT_S)  # every stream has its first token: all are in flight

    def _read(self, stub: pb_grpc.GenerateServiceStub, request) -> None:
        tokens, outcome, signalled = 0, None, False
        try:
            for response in stub.Generate(request):
                tokens += len(response.tokens)
                if not signalled:
                    signalled = True
                    self.started.wait(timeout=EXIT_WAIT_S)
                outcome = response.finish_reason or outcome
        except grpc.RpcError as error:
            outcome = error.code()
        finally:
            if not signalled:
                self.started.abort()
        self.results.append((tokens, outcome))

    def join(self) -> list[tuple[int, types_pb.FinishReason | grpc.StatusCode]]:
        for thread in self.threads:
            thread.join(timeout=EXIT_WAIT_S)
        self.channel.close()
        return self.results


def _wait_not_serving(target: str) -> None:
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        watch = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=EXIT_WAIT_S)
        for reply in watch:
            if reply.status == health_pb2.HealthCheckResponse.NOT_SERVING:
                watch.cancel()
                return


def _serve(smollm2_dir: Path, tmp_path: Path, name: str) -> ServeProcess:
    return start_serve(smollm2_dir, tmp_path / f"{name}.log", "--drain-timeout-ms", DRAIN_TIMEOUT_MS,
                       "--max-running-requests", "8", "--no-audio")


def test_sigterm_drains_streams_in_flight_refuses_new_ones_and_exits_zero(smollm2_dir: Path,
                                                                         tmp_path: Path) -> None:
    served = _serve(smollm2_dir, tmp_path, "drain")
    try:
        streams = _Streams(served.target, OUTPUT_TOKENS)
        served.process.send_signal(signal.SIGTERM)
        _wait_not_serving(served.target)
        with grpc.insecure_channel(served.target) as channel:
            try:
                list(pb_grpc.GenerateServiceStub(channel).Generate(chat_request("Hello?", 4)))
                refused = (grpc.StatusCode.OK, "")
            except grpc.RpcError as error:
                refused = (error.code(), error_reason(error))
        results = streams.join()
        exit_code = served.process.wait(timeout=EXIT_WAIT_S)
    finally:
        served.stop()
    assert refused == (grpc.StatusCode.UNAVAILABLE, "DRAINING"), served.log()
    assert results == [(OUTPUT_TOKENS, types_pb.FINISH_REASON_MAX_OUTPUT_TOKENS)] * STREAMS, served.log()
    assert exit_code == 0, served.log()
    assert "SIGTERM: draining" in served.log()


def test_a_second_signal_exits_at_once_with_the_signal_status(smollm2_dir: Path, tmp_path: Path) -> None:
    served = _serve(smollm2_dir, tmp_path, "second-signal")
    try:
        streams = _Streams(served.target, 1500)  # longer than the test waits: only the second signal ends them
        served.process.send_signal(signal.SIGTERM)
        _wait_not_serving(served.target)
        served.process.send_signal(signal.SIGINT)
        exit_code = served.process.wait(timeout=EXIT_WAIT_S)
        results = streams.join()
    finally:
        served.stop()
    assert exit_code == 128 + signal.SIGINT, served.log()
    assert [outcome for _, outcome in results] == [grpc.StatusCode.UNAVAILABLE] * STREAMS, served.log()
