"""Soak and fault harness: boots a real server and gateway on 127.0.0.1, runs a seeded mix of Generate,
Session, cancels, deadlines, client disconnects, bad inputs and admin calls over gRPC and REST
(benchmarks/soak_operations.py) at a fixed concurrency, bounded by a duration and a request count, then
checks and prints the invariants:

- only the expected status codes for each operation;
- no stuck requests: admin ListRunningRequests empty once the load stops;
- no leaked KV blocks: none held by requests, and every block free once the prefix cache is flushed;
- resident memory growth of the server under 10% from the end of warm-up to the end;
- a following greedy request answers exactly as the same request did before the soak.

    python -m benchmarks.soak --duration-s 300 --concurrency 256 --out bench-results/soak.json

Exit status 1 when an invariant fails. tests/e2e/test_soak.py runs a 60-second version.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
import grpc

from arbi_client.arbi.v1 import admin_service_pb2 as admin_pb
from arbi_gateway.process import GatewayProcess
from arbi_grpc.chat_client import wait_until_serving
from benchmarks.serve_process import free_port
from benchmarks.soak_operations import OPERATIONS, Targets, generate_request

RSS_GROWTH_LIMIT = 0.10
_IDLE_WAIT_S = 30.0


@dataclass
class SoakReport:
    duration_s: float
    concurrency: int
    requests: int
    codes: dict[str, dict[str, int]]
    unexpected: dict[str, dict[str, int]]
    stuck_requests: int
    kv_used_blocks: int
    kv_free_after_flush: int
    kv_total_blocks: int
    rss_warm_mib: float
    rss_end_mib: float
    follow_up_matches: bool
    failures: list[str] = field(default_factory=list)

    @property
    def rss_growth(self) -> float:
        return self.rss_end_mib / self.rss_warm_mib - 1


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


async def _answer(targets: Targets) -> list[int]:
    request = generate_request(random.Random(7), 16)
    request.sampling.temperature = 0.0
    return [token.token_id for response in [r async for r in targets.generate.Generate(request)]
            for token in response.tokens]


async def _worker(targets: Targets, rng: random.Random, stop_at: float, budget: list[int],
                  codes: dict[str, Counter]) -> None:
    names = list(OPERATIONS)
    weights = [OPERATIONS[name][1] for name in names]
    while time.monotonic() < stop_at and budget[0] > 0:
        budget[0] -= 1
        name = rng.choices(names, weights)[0]
        try:
            code = await OPERATIONS[name][0](targets, rng)
        except (aiohttp.ClientError, grpc.aio.AioRpcError) as error:  # a transport failure is an unexpected code
            code = f"{type(error).__name__}"
        codes[name][code] += 1


async def _idle(targets: Targets) -> int:
    """Waits for the engine to hold no request; returns how many it still holds after _IDLE_WAIT_S."""
    deadline = time.monotonic() + _IDLE_WAIT_S
    while True:
        running = await targets.admin.ListRunningRequests(admin_pb.ListRunningRequestsRequest(),
                                                          metadata=targets.admin_metadata)
        if not running.requests or time.monotonic() > deadline:
            return len(running.requests)
        await asyncio.sleep(0.2)


async def soak(grpc_target: str, http_url: str, admin_token: str, server_pid: int, duration_s: float,
               max_requests: int, concurrency: int, seed: int = 0) -> SoakReport:
    async with grpc.aio.insecure_channel(grpc_target) as channel, aiohttp.ClientSession(
            base_url=http_url, timeout=aiohttp.ClientTimeout(total=120),
            connector=aiohttp.TCPConnector(limit=concurrency)) as http:
        async with http.get("/v1/models") as reply:
            models = (await reply.json())["data"]
        targets = Targets(channel, grpc_target, http, (("authorization", f"Bearer {admin_token}"),),
                          models[0]["id"])
        reference = await _answer(targets)
        codes: dict[str, Counter] = {name: Counter() for name in OPERATIONS}
        budget = [max_requests]
        started = time.monotonic()
        warm_up_end = started + duration_s * 0.2
        workers = [asyncio.create_task(_worker(targets, random.Random(seed * 100_003 + index), warm_up_end,
                                               budget, codes)) for index in range(concurrency)]
        await asyncio.gather(*workers)
        rss_warm = _rss_mib(server_pid)
        workers = [asyncio.create_task(_worker(targets, random.Random(seed * 100_003 + concurrency + index),
                                               started + duration_s, budget, codes))
                   for index in range(concurrency)]
        await asyncio.gather(*workers)
        elapsed = time.monotonic() - started
        stuck = await _idle(targets)
        memory = await targets.admin.GetMemoryReport(admin_pb.GetMemoryReportRequest(),
                                                     metadata=targets.admin_metadata)
        await targets.admin.FlushPrefixCache(admin_pb.FlushPrefixCacheRequest(), metadata=targets.admin_metadata)
        flushed = await targets.admin.GetMemoryReport(admin_pb.GetMemoryReportRequest(),
                                                      metadata=targets.admin_metadata)
        follow_up = await _answer(targets)
        rss_end = _rss_mib(server_pid)
    unexpected = {name: {code: count for code, count in counter.items() if code not in OPERATIONS[name][2]}
                  for name, counter in codes.items()}
    report = SoakReport(
        duration_s=round(elapsed, 1), concurrency=concurrency, requests=sum(sum(c.values()) for c in codes.values()),
        codes={name: dict(counter) for name, counter in codes.items()},
        unexpected={name: found for name, found in unexpected.items() if found}, stuck_requests=stuck,
        kv_used_blocks=memory.kv_used_block_count, kv_free_after_flush=flushed.kv_free_block_count,
        kv_total_blocks=flushed.kv_block_count, rss_warm_mib=round(rss_warm, 1), rss_end_mib=round(rss_end, 1),
        follow_up_matches=follow_up == reference)
    report.failures = _failures(report)
    return report


def _failures(report: SoakReport) -> list[str]:
    checks = {
        "unexpected status codes": not report.unexpected,
        "stuck requests": report.stuck_requests == 0,
        "KV blocks held after the load": report.kv_used_blocks == 0,
        "KV blocks not free after a flush": report.kv_free_after_flush == report.kv_total_blocks,
        f"resident memory grew over {RSS_GROWTH_LIMIT:.0%}": report.rss_growth < RSS_GROWTH_LIMIT,
        "the follow-up answer changed": report.follow_up_matches,
        "every operation ran": all(report.codes.values()),
    }
    return [name for name, holds in checks.items() if not holds]


def print_report(report: SoakReport) -> None:
    print(f"soak: {report.requests} requests in {report.duration_s} s at concurrency {report.concurrency}")
    print(f"{'operation':<18} codes")
    for name, counter in report.codes.items():
        print(f"{name:<18} " + ", ".join(f"{code} {count}" for code, count in sorted(counter.items())))
    print(f"unexpected codes     {report.unexpected or 'none'}")
    print(f"stuck requests       {report.stuck_requests}")
    print(f"KV blocks held       {report.kv_used_blocks}; free after flush "
          f"{report.kv_free_after_flush} of {report.kv_total_blocks}")
    print(f"server RSS           {report.rss_warm_mib} MiB after warm-up -> {report.rss_end_mib} MiB "
          f"({report.rss_growth:+.1%})")
    print(f"follow-up answer     {'same as before' if report.follow_up_matches else 'CHANGED'}")
    print("result               " + ("PASS" if not report.failures else "FAIL: " + "; ".join(report.failures)))


def _boot(args: argparse.Namespace, admin_token: str, scratch: Path) -> tuple[subprocess.Popen, str, GatewayProcess]:
    """Starts `arbi-serve serve` and `arbi-gateway` on free loopback ports; returns once both answer."""
    port = free_port()
    with open(scratch / "server.log", "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "arbi_grpc", "serve", *(["--model", args.model] if args.model else []),
             "--port", str(port), "--metrics-port", "0", "--admin-token", admin_token, "--no-audio",
             "--kv-cache-memory-mib", str(args.kv_cache_memory_mib), "--max-model-len", "512",
             "--max-waiting-requests", str(4 * args.concurrency), "--torch-threads", str(args.torch_threads)],
            stdout=log, stderr=subprocess.STDOUT)
    target = f"127.0.0.1:{port}"
    if not wait_until_serving(target, 300, lambda: server.poll() is None):
        server.kill()
        raise SystemExit(f"the server did not start:\n{(scratch / 'server.log').read_text()[-3000:]}")
    gateway = GatewayProcess.spawn(["--upstream", target, "--http-port", "0", "--upstream-metrics-url", ""],
                                   scratch / "gateway.log")
    return server, target, gateway


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Soak and fault harness on 127.0.0.1 (see the module doc).")
    parser.add_argument("--model", default="", help="model to serve (default: the embedded SmolLM2)")
    parser.add_argument("--duration-s", type=float, default=60.0, help="how long the load runs")
    parser.add_argument("--max-requests", type=int, default=100_000, help="most operations started in all")
    parser.add_argument("--concurrency", type=int, default=64, help="operations in flight at once (64-256)")
    parser.add_argument("--kv-cache-memory-mib", type=int, default=64)
    parser.add_argument("--torch-threads", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench-results/soak.json"))
    args = parser.parse_args(argv)
    admin_token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="arbi-soak-") as scratch:  # the processes' logs
        server, target, gateway = _boot(args, admin_token, Path(scratch))
        try:
            report = asyncio.run(soak(target, gateway.url, admin_token, server.pid, args.duration_s,
                                      args.max_requests, args.concurrency, args.seed))
        finally:
            gateway.stop()
            server.terminate()
            server.wait(timeout=60)
    print_report(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(asdict(report) | {"rss_growth": report.rss_growth}, indent=2))
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
