"""Benchmark: batch throughput in chat lines per second (SmolLM2 on the CPU, through BatchService), and the
time to first token of interactive requests during a batch as a ratio of the idle server's.

    python -m benchmarks.batches --lines 60 --max-tokens 16 --out bench-results/batches.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from datetime import date
from pathlib import Path

import grpc

from arbi_client.arbi.v1 import batch_service_pb2 as batch_pb
from arbi_client.arbi.v1 import batch_service_pb2_grpc as batch_grpc
from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as generate_grpc
from arbi_grpc.config import EngineConfig
from arbi_grpc.models.model_cache import DEFAULT_MODEL, resolve_model
from arbi_grpc.served_model import build_served_model
from arbi_grpc.server import GrpcServer
from arbi_grpc.server_config import ServerConfig
from tests.e2e.batch_helpers import chat_line, jsonl, upload, wait_for_batch

TOPICS = ["the ocean", "a city at night", "mountains", "a library", "trains", "the moon"]


def ttft_s(channel: grpc.Channel, model: str) -> float:
    request = pb.GenerateRequest(model=model)
    request.chat.messages.add(role="user", content="Write one sentence about rivers.")
    request.stopping.max_output_tokens = 2
    start = time.perf_counter()
    stream = generate_grpc.GenerateServiceStub(channel).Generate(request, timeout=120)
    next(iter(stream))
    elapsed = time.perf_counter() - start
    stream.cancel()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=60)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--in-flight", type=int, default=2)
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench-results/batches.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        server = GrpcServer(build_served_model(EngineConfig(model=str(resolve_model(DEFAULT_MODEL).directory))),
                            config=ServerConfig(audio=False, data_dir=data_dir,
                                                max_batch_lines_in_flight=args.in_flight)).start()
        try:
            model = server.served.name
            with grpc.insecure_channel(server.target) as channel:
                idle = statistics.median(ttft_s(channel, model) for _ in range(args.probes))
                lines = [chat_line(model, f"line-{i}", f"Write about {TOPICS[i % len(TOPICS)]} ({i}).", args.max_tokens)
                         for i in range(args.lines)]
                input_file = upload(channel, jsonl(lines))
                start = time.perf_counter()
                batch = batch_grpc.BatchServiceStub(channel).CreateBatch(batch_pb.CreateBatchRequest(
                    input_file_id=input_file.id, endpoint="/v1/chat/completions", completion_window="24h")).batch
                busy = statistics.median(ttft_s(channel, model) for _ in range(args.probes))
                ended = wait_for_batch(channel, batch.id, timeout_s=3600, statuses=("completed", "failed"))
                elapsed = time.perf_counter() - start
        finally:
            server.stop()
    result = {"date": date.today().isoformat(), "machine": platform.processor() or platform.machine(),
              "lines": args.lines, "max_tokens": args.max_tokens, "in_flight": args.in_flight,
              "status": ended.status, "lines_per_s": args.lines / elapsed,
              "idle_ttft_ms": idle * 1000, "busy_ttft_ms": busy * 1000, "ttft_ratio": busy / idle}
    print("| lines | max tokens | in flight | lines/s | idle TTFT ms | TTFT during batch ms | ratio |")
    print(f"| {args.lines} | {args.max_tokens} | {args.in_flight} | {result['lines_per_s']:.2f} | "
          f"{result['idle_ttft_ms']:.0f} | {result['busy_ttft_ms']:.0f} | {result['ttft_ratio']:.2f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
