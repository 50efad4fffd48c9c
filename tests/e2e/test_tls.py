"""TLS on a real server with a throwaway CA: plaintext clients are refused, clients trusting the CA generate,
and with client certificates required (mTLS) a client without one is refused while batches still run;
`arbi-serve chat` answers over mTLS with `--ca-file` and its client certificate, and so does the gateway with
its upstream TLS flags."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from arbi_gateway.process import GatewayProcess
from grpc_health.v1 import health_pb2, health_pb2_grpc

from arbi_client import ArbiClient
from arbi_client.arbi.v1 import batch_service_pb2 as batch_pb
from arbi_client.arbi.v1 import batch_service_pb2_grpc as batch_grpc
from arbi_client.tls import ChannelTls, open_channel
from arbi_grpc.config import EngineConfig
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.served_model import build_served_model
from arbi_grpc.server import GrpcServer
from arbi_grpc.server_config import ServerConfig
from tests.e2e.batch_helpers import chat_line, jsonl, lines_of, upload, wait_for_batch
from tests.e2e.serve_process import run_cli
from tests.e2e.tls_certificates import CertificateFiles, make_certificates

QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> CertificateFiles:
    return make_certificates(tmp_path_factory.mktemp("tls"))


def _tls_config(certificates: CertificateFiles, client_ca: str = "") -> ServerConfig:
    return ServerConfig(tls_cert_file=str(certificates.server_cert), tls_key_file=str(certificates.server_key),
                        tls_client_ca_file=client_ca, audio=False)


@pytest.fixture(scope="module")
def tls_server(certificates: CertificateFiles) -> Iterator[GrpcServer]:
    """TLS without client certificates; no model is loaded: the health service proves the handshake."""
    server = GrpcServer(EngineConfig(), config=_tls_config(certificates)).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def mtls_server(smollm2_dir: Path, certificates: CertificateFiles,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcServer]:
    engine = EngineConfig(model=str(smollm2_dir), kv_cache_memory_mib=32, max_running_requests=4)
    config = replace(_tls_config(certificates, str(certificates.ca)), data_dir=str(tmp_path_factory.mktemp("data")))
    server = GrpcServer(build_served_model(engine), config=config).start()
    yield server
    server.stop()


def _health(channel: grpc.Channel) -> grpc.StatusCode:
    try:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def test_plaintext_clients_are_refused_and_clients_trusting_the_ca_connect(tls_server: GrpcServer,
                                                                           certificates: CertificateFiles) -> None:
    with grpc.insecure_channel(tls_server.target) as channel:
        assert _health(channel) == grpc.StatusCode.UNAVAILABLE
    with open_channel(tls_server.target, ChannelTls(str(certificates.ca))) as channel:
        assert _health(channel) == grpc.StatusCode.OK


def test_mtls_refuses_clients_without_a_certificate_and_serves_those_with_one(
        mtls_server: GrpcServer, certificates: CertificateFiles) -> None:
    with grpc.insecure_channel(mtls_server.target) as channel:
        assert _health(channel) == grpc.StatusCode.UNAVAILABLE
    with open_channel(mtls_server.target, ChannelTls(str(certificates.ca))) as channel:
        assert _health(channel) == grpc.StatusCode.UNAVAILABLE
    tls = ChannelTls(str(certificates.ca), str(certificates.client_cert), str(certificates.client_key))
    with ArbiClient(mtls_server.target, tls=tls) as client:
        reply = "".join(client.stream_chat([{"role": "user", "content": QUESTION}], max_output_tokens=8))
    assert reply.strip()


def test_batches_run_behind_mtls(mtls_server: GrpcServer, certificates: CertificateFiles) -> None:
    tls = ChannelTls(str(certificates.ca), str(certificates.client_cert), str(certificates.client_key))
    with open_channel(mtls_server.target, tls) as channel:
        stored = upload(channel, jsonl([chat_line(mtls_server.served.name, "one", QUESTION, max_tokens=4)]))
        created = batch_grpc.BatchServiceStub(channel).CreateBatch(batch_pb.CreateBatchRequest(
            input_file_id=stored.id, endpoint="/v1/chat/completions", completion_window="24h"), timeout=30).batch
        batch = wait_for_batch(channel, created.id)
        assert (batch.status, batch.request_counts.completed) == ("completed", 1)
        assert lines_of(channel, batch.output_file_id)[0]["response"]["status_code"] == 200


def test_chat_command_takes_the_ca_and_client_certificate(mtls_server: GrpcServer,
                                                          certificates: CertificateFiles) -> None:
    result = run_cli("chat", QUESTION, "--url", mtls_server.target, "--max-tokens", "8",
                     "--ca-file", str(certificates.ca), "--tls-cert-file", str(certificates.client_cert),
                     "--tls-key-file", str(certificates.client_key))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_tls_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="tls_cert_file"):
        ServerConfig(tls_cert_file="server.pem")
    with pytest.raises(InvalidArgumentError, match="tls_client_ca_file"):
        ServerConfig(tls_client_ca_file="ca.pem")
    missing = ServerConfig(tls_cert_file=str(tmp_path / "none.pem"), tls_key_file=str(tmp_path / "none.key"))
    with pytest.raises(InvalidArgumentError, match="tls_cert_file: cannot read"):
        missing.server_credentials()


def test_gateway_reaches_an_mtls_upstream(mtls_server: GrpcServer, certificates: CertificateFiles,
                                          tmp_path: Path) -> None:
    body = json.dumps({"model": mtls_server.served.name, "messages": [{"role": "user", "content": QUESTION}],
                       "max_tokens": 8}).encode()
    with GatewayProcess.spawn(["--upstream", mtls_server.target, "--http-port", "0", "--upstream-metrics-url", "",
                               "--upstream-tls-ca-file", str(certificates.ca),
                               "--upstream-tls-cert-file", str(certificates.client_cert),
                               "--upstream-tls-key-file", str(certificates.client_key)],
                              tmp_path / "gateway.log") as gateway:
        request = urllib.request.Request(gateway.url + "/v1/chat/completions", data=body,
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            reply = json.loads(response.read())
    assert reply["choices"][0]["message"]["content"].strip()
