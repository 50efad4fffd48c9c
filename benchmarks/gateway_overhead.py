"""Gateway overhead against direct gRPC, measured in one run against one server.

- Added latency per request: the same short request (a 1-token completion, and a Tokenize call that
  never reaches the engine) sent sequentially to the server over gRPC and to the gateway over HTTP
  (/v1/completions, /v1/text:tokenize when annotated), alternating; p50 and p99 of each path and their
  difference.
- Streamed tokens/s at 1 and 64 concurrent streams: greedy generations of a fixed length (ignore_eos)
  read as gRPC streams and as the gateway's SSE streams; the ratio gateway / direct.

The server is the one at --upstream, or one this script starts (`arbi-serve serve`, in a subprocess: this
process imports no torch). Both clients are synchronous Python (grpc, http.client) in threads, so client
costs are part of what is measured. Prints a table and writes JSON to --out.

Usage: python -m benchmarks.gateway_overhead --out bench-results/gateway_overhead.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as pb_grpc
from arbi_gateway.process import GatewayProcess
from benchmarks.serve_process import start_serve

_PROMPT = "Write a long story about a lighthouse keeper."


def _start_server(model: str, kv_cache_memory_mib: int, torch_threads: int,
                  log_path: Path) -> tuple[subprocess.Popen, str]:
    flags = ["--kv-cache-memory-mib", str(kv_cache_memory_mib), "--max-running-requests", "64",
             "--torch-threads", str(torch_threads), *(["--model", model] if model else [])]
    return start_serve(flags, log_path)


class _Http:
    """One keep-alive HTTP/1.1 connection per thread."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self._connection = http.client.HTTPConnection(host, int(port), timeout=600)

    def post(self, path: str, body: dict[str, Any]) -> http.client.HTTPResponse:
        self._connection.request("POST", path, json.dumps(body), {"content-type": "application/json"})
        response = self._connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"POST {path}: {response.status} {response.read()[:300]!r}")
        return response


def _generate_request(tokens: int) -> pb.GenerateRequest:
    request = pb.GenerateRequest(prompt=_PROMPT)
    request.sampling.temperature = 0
    request.stopping.max_output_tokens = tokens
    request.stopping.ignore_eos = True
    return request


def _completion_body(tokens: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "", "prompt": _PROMPT, "temperature": 0, "max_tokens": tokens,
                            "ignore_eos": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def _percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    return {"p50_ms": statistics.median(ordered), "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]}


def _latency(direct: Callable[[], None], gateway: Callable[[], None], requests: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {"direct": [], "gateway": []}
    for _ in range(3):  # warm both paths
        direct()
        gateway()
    for _ in range(requests):
        for name, call in (("direct", direct), ("gateway", gateway)):
            started = time.perf_counter()
            call()
            times[name].append((time.perf_counter() - started) * 1e3)
    result = {name: _percentiles(samples) for name, samples in times.items()}
    result["added"] = {key: result["gateway"][key] - result["direct"][key] for key in ("p50_ms", "p99_ms")}
    return result


def _stream_direct(stub: pb_grpc.GenerateServiceStub, tokens: int) -> int:
    return sum(len(response.tokens) for response in stub.Generate(_generate_request(tokens)))


def _stream_gateway(url: str, tokens: int) -> int:
    response = _Http(url).post("/v1/completions", _completion_body(tokens, stream=True))
    generated = 0
    for line in response:
        if line.startswith(b"data: {"):
            usage = json.loads(line[6:]).get("usage")
            if usage:
                generated = usage["completion_tokens"]
    return generated


def _throughput(run_one: Callable[[], int], streams: int) -> float:
    with ThreadPoolExecutor(streams) as pool:
        started = time.perf_counter()
        generated = sum(pool.map(lambda _: run_one(), range(streams)))
        return generated / (time.perf_counter() - started)


def run(upstream: str, gateway_url: str, requests: int, stream_tokens: int,
        concurrencies: list[int], repeats: int) -> dict[str, Any]:
    channel = grpc.insecure_channel(upstream)
    stub = pb_grpc.GenerateServiceStub(channel)
    http = _Http(gateway_url)
    results: dict[str, Any] = {"upstream": upstream, "gateway": gateway_url, "requests": requests}
    results["latency_completion_1_token"] = _latency(
        lambda: list(stub.Generate(_generate_request(1))),
        lambda: http.post("/v1/completions", _completion_body(1, stream=False)).read(),
        requests,
    )
    tokenize = stub.Tokenize
    results["latency_tokenize"] = _latency(
        lambda: tokenize(pb.TokenizeRequest(prompt=_PROMPT)),
        lambda: http.post("/v1/text:tokenize", {"prompt": _PROMPT}).read(),
        requests,
    ) if _has_route(gateway_url, "/v1/text:tokenize") else None
    results["throughput"] = []
    for streams in concurrencies:
        direct, via_gateway = [], []
        for _ in range(repeats):  # alternate, so drift affects both paths alike
            direct.append(_throughput(lambda: _stream_direct(stub, stream_tokens), streams))
            via_gateway.append(_throughput(lambda: _stream_gateway(gateway_url, stream_tokens), streams))
        row = {"streams": streams, "tokens_per_stream": stream_tokens,
               "direct_tokens_per_s": statistics.median(direct),
               "gateway_tokens_per_s": statistics.median(via_gateway)}
        row["ratio"] = row["gateway_tokens_per_s"] / row["direct_tokens_per_s"]
        results["throughput"].append(row)
    channel.close()
    return results


def _has_route(url: str, path: str) -> bool:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request("GET", "/openapi.json")
    return path in json.loads(connection.getresponse().read())["paths"]


def _print_table(results: dict[str, Any]) -> None:
    print(f"gateway overhead vs direct gRPC ({results['requests']} sequential requests per path)")
    print(f"{'request':<28}{'direct p50':>12}{'gateway p50':>13}{'added p50':>11}{'direct p99':>12}"
          f"{'gateway p99':>13}{'added p99':>11}")
    for key in ("latency_completion_1_token", "latency_tokenize"):
        row = results.get(key)
        if row is None:
            continue
        d, g, a = row["direct"], row["gateway"], row["added"]
        print(f"{key.removeprefix('latency_'):<28}{d['p50_ms']:>10.2f}ms{g['p50_ms']:>11.2f}ms{a['p50_ms']:>9.2f}ms"
              f"{d['p99_ms']:>10.2f}ms{g['p99_ms']:>11.2f}ms{a['p99_ms']:>9.2f}ms")
    print(f"\n{'streams':>8}{'tokens each':>13}{'direct tok/s':>14}{'gateway tok/s':>15}{'ratio':>8}")
    for row in results["throughput"]:
        print(f"{row['streams']:>8}{row['tokens_per_stream']:>13}{row['direct_tokens_per_s']:>14.1f}"
              f"{row['gateway_tokens_per_s']:>15.1f}{row['ratio']:>8.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON results")
    parser.add_argument("--upstream", default="", help="gRPC address of a running server (default: start one)")
    parser.add_argument("--model", default="", help="model for the server this script starts")
    parser.add_argument("--kv-cache-memory-mib", type=int, default=512)
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="CPU threads of the server this script starts (leave cores to the gateway and "
                             "the clients, as a deployment would)")
    parser.add_argument("--requests", type=int, default=200, help="sequential requests per path (latency)")
    parser.add_argument("--stream-tokens", type=int, default=32, help="tokens per stream (throughput)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--repeats", type=int, default=2, help="throughput runs per path and concurrency")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="arbi-bench-overhead-") as scratch:
        server = None
        upstream = args.upstream
        if not upstream:
            server, upstream = _start_server(args.model, args.kv_cache_memory_mib, args.torch_threads,
                                             Path(scratch, "server.log"))
        try:
            with GatewayProcess.spawn(["--upstream", upstream, "--http-port", "0", "--log-level", "warning"],
                                      Path(scratch, "gateway.log")) as gateway:
                results = run(upstream, gateway.url, args.requests, args.stream_tokens, args.concurrency,
                              args.repeats)
        finally:
            if server is not None:
                server.terminate()
                server.wait(30)
    _print_table(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
