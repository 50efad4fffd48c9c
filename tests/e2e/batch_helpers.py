"""gRPC helpers of the Files and Batches tests: upload a JSONL, wait for a batch, read a file's lines."""

from __future__ import annotations

import json
import time

import grpc
from arbi_client.arbi.v1 import batch_service_pb2 as batch_pb
from arbi_client.arbi.v1 import batch_service_pb2_grpc as batch_grpc
from arbi_client.arbi.v1 import file_service_pb2 as file_pb
from arbi_client.arbi.v1 import file_service_pb2_grpc as file_grpc

ENDED = ("completed", "failed", "cancelled", "expired")


def chat_line(model: str, custom_id: str, prompt: str, max_tokens: int = 8) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": prompt}],
                     "max_tokens": max_tokens, "temperature": 0}}


def upload(channel: grpc.Channel, content: bytes, purpose: str = "batch", filename: str = "input.jsonl",
           chunk_bytes: int = 64 * 1024):
    parts = [file_pb.UploadFileRequest(metadata=file_pb.UploadFileMetadata(filename=filename, purpose=purpose))]
    parts += [file_pb.UploadFileRequest(chunk=content[start:start + chunk_bytes])
              for start in range(0, len(content), chunk_bytes)]
    return file_grpc.FileServiceStub(channel).UploadFile(iter(parts), timeout=60).file


def jsonl(lines: list) -> bytes:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines).encode()


def content_of(channel: grpc.Channel, file_id: str) -> bytes:
    stub = file_grpc.FileServiceStub(channel)
    return b"".join(part.chunk for part in stub.GetFileContent(file_pb.GetFileContentRequest(file_id=file_id),
                                                                timeout=60))


def lines_of(channel: grpc.Channel, file_id: str) -> list[dict]:
    if not file_id:
        return []
    return [json.loads(line) for line in content_of(channel, file_id).decode().splitlines()]


def wait_for_batch(channel: grpc.Channel, batch_id: str, timeout_s: float = 300, statuses=ENDED):
    stub = batch_grpc.BatchServiceStub(channel)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = stub.GetBatch(batch_pb.GetBatchRequest(batch_id=batch_id), timeout=30).batch
        if batch.status in statuses:
            return batch
        time.sleep(0.2)
    raise AssertionError(f"batch {batch_id} still {batch.status} after {timeout_s} s")
