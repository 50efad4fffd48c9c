"""A `serve` process SIGKILLed during a batch, restarted on the same --data-dir: the batch resumes and
completes with every line answered exactly once, and the uploaded files survive."""

from __future__ import annotations

import signal
import time
from collections import Counter

import grpc
from arbi_client.arbi.v1 import batch_service_pb2 as batch_pb
from arbi_client.arbi.v1 import batch_service_pb2_grpc as batch_grpc
from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as generate_grpc

from tests.e2e.batch_helpers import chat_line, content_of, jsonl, lines_of, upload, wait_for_batch
from tests.e2e.serve_process import start_serve

LINES = 16


def test_sigkill_during_a_batch_resumes_it_at_restart(smollm2_dir, tmp_path):
    flags = ("--no-audio", "--data-dir", str(tmp_path / "data"), "--max-batch-lines-in-flight", "2")
    served = start_serve(smollm2_dir, tmp_path / "first.log", *flags)
    try:
        with grpc.insecure_channel(served.target) as channel:
            model = generate_grpc.GenerateServiceStub(channel).ListServedModels(
                pb.ListServedModelsRequest(), timeout=30).models[0].name
            content = jsonl([chat_line(model, f"line-{index}", f"Say the number {index}.", 12) for index in range(LINES)])
            input_file = upload(channel, content)
            batch = batch_grpc.BatchServiceStub(channel).CreateBatch(batch_pb.CreateBatchRequest(
                input_file_id=input_file.id, endpoint="/v1/chat/completions", completion_window="24h"), timeout=30).batch
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                counts = batch_grpc.BatchServiceStub(channel).GetBatch(
                    batch_pb.GetBatchRequest(batch_id=batch.id), timeout=30).batch.request_counts
                if counts.completed >= 3:
                    break
                time.sleep(0.05)
        assert 3 <= counts.completed < LINES, counts  # killed in the middle of the batch
        served.process.send_signal(signal.SIGKILL)
        served.process.wait(timeout=30)
    finally:
        served.stop()
    restarted = start_serve(smollm2_dir, tmp_path / "second.log", *flags)
    try:
        with grpc.insecure_channel(restarted.target) as channel:
            assert content_of(channel, input_file.id) == content
            ended = wait_for_batch(channel, batch.id, timeout_s=180)
            assert ended.status == "completed", restarted.log()
            assert (ended.request_counts.total, ended.request_counts.completed, ended.request_counts.failed) == (
                LINES, LINES, 0)
            outputs = lines_of(channel, ended.output_file_id)
            assert Counter(line["custom_id"] for line in outputs) == Counter(f"line-{index}" for index in range(LINES))
            assert all(line["response"]["status_code"] == 200 for line in outputs)
    finally:
        restarted.stop()
