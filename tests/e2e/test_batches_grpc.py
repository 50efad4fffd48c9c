"""FileService and BatchService over gRPC with the real SmolLM2: a batch answers every line once with the
output of the same request sent directly; bad lines land in the error file; bad calls get precise statuses."""

from __future__ import annotations

from collections import Counter

import grpc
import pytest
from arbi_client.arbi.v1 import batch_service_pb2 as batch_pb
from arbi_client.arbi.v1 import batch_service_pb2_grpc as batch_grpc
from arbi_client.arbi.v1 import file_service_pb2 as file_pb
from arbi_client.arbi.v1 import file_service_pb2_grpc as file_grpc
from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as generate_grpc

from tests.conftest import wait_for_idle_pool
from tests.e2e.batch_helpers import chat_line, content_of, jsonl, lines_of, upload, wait_for_batch

MODEL = ""  # the served model's name, set by the server fixture
PROMPTS = ["Name a colour.", "What is 2+2?", "Say hello.", "Name a fruit.", "Count to three.", "Name a city."]


@pytest.fixture(scope="module")
def server(smollm2_dir, tmp_path_factory):
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.served_model import build_served_model
    from arbi_grpc.server import GrpcServer
    from arbi_grpc.server_config import ServerConfig

    config = EngineConfig(model=str(smollm2_dir), kv_cache_memory_mib=128)
    server_config = ServerConfig(audio=False, max_file_mib=1, data_dir=str(tmp_path_factory.mktemp("data")))
    server = GrpcServer(build_served_model(config), config=server_config).start()
    global MODEL
    MODEL = server.served.name
    yield server
    server.stop()


@pytest.fixture(scope="module")
def channel(server):
    with grpc.insecure_channel(server.target) as channel:
        yield channel


def _direct_text(channel, prompt: str) -> str:
    request = pb.GenerateRequest(model=MODEL)
    request.chat.messages.add(role="user", content=prompt)
    request.stopping.max_output_tokens = 8
    request.sampling.temperature = 0
    return "".join(response.text for response in generate_grpc.GenerateServiceStub(channel).Generate(request, timeout=60))


def test_batch_answers_every_line_once_like_direct_requests(server, channel):
    lines = [chat_line(MODEL, f"req-{index}", PROMPTS[index % len(PROMPTS)]) for index in range(12)]
    bad = ["{not json", {"custom_id": "wrong-url", "method": "POST", "url": "/v1/images", "body": {}},
           {**chat_line(MODEL, "req-0", "duplicate id"), "custom_id": "req-0"}]
    input_file = upload(channel, jsonl(lines[:6] + bad + lines[6:]))
    stub = batch_grpc.BatchServiceStub(channel)
    created = stub.CreateBatch(batch_pb.CreateBatchRequest(input_file_id=input_file.id, endpoint="/v1/chat/completions",
                                                           completion_window="24h"), timeout=30).batch
    assert created.status == "in_progress" and created.request_counts.total == 15
    batch = wait_for_batch(channel, created.id)
    assert batch.status == "completed", batch
    assert batch.request_counts.failed == 3, lines_of(channel, batch.error_file_id)
    assert (batch.request_counts.completed, batch.request_counts.failed) == (12, 3)
    outputs = lines_of(channel, batch.output_file_id)
    assert Counter(line["custom_id"] for line in outputs) == Counter(line["custom_id"] for line in lines)
    for output in outputs:
        prompt = PROMPTS[int(output["custom_id"].split("-")[1]) % len(PROMPTS)]
        body = output["response"]["body"]
        assert output["response"]["status_code"] == 200 and output["error"] is None
        assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] > 0
        assert body["choices"][0]["message"]["content"] == _direct_text(channel, prompt)
    errors = {line["custom_id"]: line["error"]["code"] for line in lines_of(channel, batch.error_file_id)}
    assert errors == {None: "invalid_json_line", "wrong-url": "invalid_url", "req-0": "duplicate_custom_id"}
    files = file_grpc.FileServiceStub(channel).ListFiles(file_pb.ListFilesRequest(purpose="batch_output"), timeout=30)
    assert {batch.output_file_id, batch.error_file_id} <= {file.id for file in files.files}
    wait_for_idle_pool(server.served.engine)


def test_batch_list_pages_and_cancel(channel):
    stub = batch_grpc.BatchServiceStub(channel)
    input_file = upload(channel, jsonl([chat_line(MODEL, f"c-{index}", "Tell a long story.", 24) for index in range(20)]))
    created = [stub.CreateBatch(batch_pb.CreateBatchRequest(input_file_id=input_file.id, endpoint="/v1/chat/completions",
                                                            completion_window="24h"), timeout=30).batch
               for _ in range(2)]
    for batch in created:
        assert stub.CancelBatch(batch_pb.CancelBatchRequest(batch_id=batch.id), timeout=30).batch.status == "cancelling"
    for batch in created:
        ended = wait_for_batch(channel, batch.id)
        assert ended.status == "cancelled"
        assert ended.request_counts.completed + ended.request_counts.failed < 20
    first = stub.ListBatches(batch_pb.ListBatchesRequest(limit=1), timeout=30)
    assert [batch.id for batch in first.batches] == [created[1].id] and first.has_more
    second = stub.ListBatches(batch_pb.ListBatchesRequest(after=created[1].id, limit=1), timeout=30)
    assert [batch.id for batch in second.batches] == [created[0].id]
    with pytest.raises(grpc.RpcError) as error:
        stub.CancelBatch(batch_pb.CancelBatchRequest(batch_id=created[0].id), timeout=30)
    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_bad_calls_get_precise_statuses(channel):
    files = file_grpc.FileServiceStub(channel)
    batches = batch_grpc.BatchServiceStub(channel)
    calls = {
        "wrong purpose": (lambda: upload(channel, b"x", purpose="batch_output"), grpc.StatusCode.INVALID_ARGUMENT),
        "oversized": (lambda: upload(channel, b"x" * (1024 * 1024 + 1)), grpc.StatusCode.RESOURCE_EXHAUSTED),
        "unknown file": (lambda: files.GetFile(file_pb.GetFileRequest(file_id="file-nope"), timeout=30),
                         grpc.StatusCode.NOT_FOUND),
        "unknown content": (lambda: content_of(channel, "file-nope"), grpc.StatusCode.NOT_FOUND),
        "unknown batch": (lambda: batches.GetBatch(batch_pb.GetBatchRequest(batch_id="batch_nope"), timeout=30),
                          grpc.StatusCode.NOT_FOUND),
        "unknown input": (lambda: batches.CreateBatch(batch_pb.CreateBatchRequest(
            input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h"), timeout=30),
            grpc.StatusCode.NOT_FOUND),
    }
    user_file = upload(channel, jsonl([chat_line(MODEL, "a", "hi")]), purpose="user_data")
    batch_file = upload(channel, jsonl([chat_line(MODEL, "a", "hi")]))
    for name, endpoint, file_id, window in (("input purpose", "/v1/chat/completions", user_file.id, "24h"),
                                            ("unknown endpoint", "/v1/images", batch_file.id, "24h"),
                                            ("window", "/v1/chat/completions", batch_file.id, "1h")):
        calls[name] = (lambda e=endpoint, f=file_id, w=window: batches.CreateBatch(batch_pb.CreateBatchRequest(
            input_file_id=f, endpoint=e, completion_window=w), timeout=30), grpc.StatusCode.INVALID_ARGUMENT)
    for name, (call, code) in calls.items():
        with pytest.raises(grpc.RpcError) as error:
            call()
        assert error.value.code() == code, name
    assert files.DeleteFile(file_pb.DeleteFileRequest(file_id=user_file.id), timeout=30).file_id == user_file.id
    with pytest.raises(grpc.RpcError) as error:
        files.GetFile(file_pb.GetFileRequest(file_id=user_file.id), timeout=30)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
