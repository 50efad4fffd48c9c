"""SIGTERM on a real gateway process while SSE chat streams are in flight: new requests are answered 503
(code "draining"), every stream in flight ends with its finish reason and [DONE], and the gateway exits 0."""

from __future__ import annotations

import json
import signal
import threading
import urllib.error
import urllib.request
from pathlib import Path

from arbi_gateway.process import GatewayProcess

from tests.conftest import wait_for_idle_pool

STREAMS = 3
EXIT_WAIT_S = 120


def _stream_chat(url: str, model: str, started: threading.Barrier, results: list[tuple[str, bool]]) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": "Count to fifty in words."}],
            "temperature": 0, "max_tokens": 48, "stream": True}
    finish, done, signalled = "", False, False
    try:
        request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=EXIT_WAIT_S) as response:
            for raw in response:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                if not signalled:
                    signalled = True
                    started.wait(timeout=EXIT_WAIT_S)
                if line == "data: [DONE]":
                    done = True
                    continue
                for choice in json.loads(line[len("data: "):]).get("choices", []):
                    finish = choice.get("finish_reason") or finish
    finally:
        if not signalled:
            started.abort()
        results.append((finish, done))


def _refusal(url: str) -> dict | None:
    """The body of a 503 answer to GET `url`, or None when it is answered otherwise."""
    try:
        with urllib.request.urlopen(url, timeout=EXIT_WAIT_S):
            return None
    except urllib.error.HTTPError as error:
        return json.loads(error.read()) if error.code == 503 else None


def test_sigterm_drains_streams_refuses_new_requests_and_exits_zero(served_smollm2, tmp_path: Path) -> None:
    gateway = GatewayProcess.spawn(["--upstream", served_smollm2.target, "--http-port", "0",
                                    "--upstream-metrics-url", "", "--http-drain-timeout-ms", "120000"],
                                   tmp_path / "gateway.log")
    try:
        started, results = threading.Barrier(STREAMS + 1), []
        threads = [threading.Thread(target=_stream_chat, args=(gateway.url, served_smollm2.served.name, started,
                                                               results)) for _ in range(STREAMS)]
        for thread in threads:
            thread.start()
        started.wait(timeout=EXIT_WAIT_S)
        gateway.process.send_signal(signal.SIGTERM)
        refused = None
        while refused is None:  # until the signal is handled
            refused = _refusal(gateway.url + "/v1/models")
        for thread in threads:
            thread.join(timeout=EXIT_WAIT_S)
        exit_code = gateway.process.wait(timeout=EXIT_WAIT_S)
    finally:
        gateway.stop()
    log = gateway.log_path.read_text()
    assert refused["error"]["code"] == "draining", log
    assert len(results) == STREAMS and all(finish in ("stop", "length") and done for finish, done in results), log
    assert exit_code == 0, log
    wait_for_idle_pool(served_smollm2.served.engine)
