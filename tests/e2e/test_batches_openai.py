"""Files and Batches through the gateway with the official `openai` SDK and the real SmolLM2: a batch of 60
chat lines answers every custom_id once with the text of the same request sent directly; embedding lines
(all-MiniLM-L6-v2) answer what embeddings.create answers; files.list pages (limit, after, order); bad uploads
and unknown ids get OpenAI's errors (400, 404, 413)."""

from __future__ import annotations

import base64
import io
import json
import time
from collections import Counter

import numpy as np
import openai
import pytest
from arbi_gateway.process import GatewayProcess

from tests.conftest import wait_for_idle_pool
from tests.e2e.batch_helpers import chat_line, jsonl

PROMPTS = ["Name a colour.", "What is 2+2?", "Say hello.", "Name a fruit.", "Count to three.", "Name a city."]
LINES = 60
MAX_TOKENS = 4


@pytest.fixture(scope="module")
def server(smollm2_dir, tmp_path_factory):
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.served_model import build_served_model
    from arbi_grpc.server import GrpcServer
    from arbi_grpc.server_config import ServerConfig

    from arbi_grpc.embeddings.resident import MINILM_NAME

    config = EngineConfig(model=str(smollm2_dir), kv_cache_memory_mib=128)
    server_config = ServerConfig(audio=False, max_file_mib=1, data_dir=str(tmp_path_factory.mktemp("data")),
                                 embedding_models=MINILM_NAME)
    server = GrpcServer(build_served_model(config), config=server_config).start()
    server.wait_for_embedding_models()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(server, tmp_path_factory):
    gateway = GatewayProcess.spawn(["--upstream", server.target, "--http-port", "0"],
                                   tmp_path_factory.mktemp("gateway-batches") / "gateway.log")
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0) as sdk:
        yield sdk
    gateway.stop()


def _wait(client, batch_id: str):
    batch = client.batches.retrieve(batch_id)
    deadline = time.monotonic() + 300
    while batch.status not in ("completed", "failed", "cancelled", "expired") and time.monotonic() < deadline:
        time.sleep(0.5)
        batch = client.batches.retrieve(batch_id)
    return batch


def test_sixty_chat_lines_through_the_sdk(server, client):
    model = server.served.name
    lines = [chat_line(model, f"line-{index}", PROMPTS[index % len(PROMPTS)], MAX_TOKENS) for index in range(LINES)]
    uploaded = client.files.create(file=("input.jsonl", io.BytesIO(jsonl(lines))), purpose="batch")
    assert client.files.retrieve(uploaded.id).bytes == len(jsonl(lines))
    batch = _wait(client, client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                                completion_window="24h").id)
    assert batch.status == "completed" and batch.request_counts.completed == LINES and batch.error_file_id is None
    outputs = [json.loads(line) for line in client.files.content(batch.output_file_id).text.splitlines()]
    assert Counter(output["custom_id"] for output in outputs) == Counter(line["custom_id"] for line in lines)
    direct = {prompt: client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                                     max_tokens=MAX_TOKENS, temperature=0).choices[0].message.content
              for prompt in PROMPTS}
    for output in outputs:
        prompt = PROMPTS[int(output["custom_id"].split("-")[1]) % len(PROMPTS)]
        assert output["response"]["body"]["choices"][0]["message"]["content"] == direct[prompt]
    page = client.batches.list(limit=1)
    assert [entry.id for entry in page.data] == [batch.id]
    wait_for_idle_pool(server.served.engine)


def test_embedding_lines_answer_as_embeddings_create(server, client):
    from arbi_grpc.embeddings.resident import MINILM_NAME

    bodies = {"one": {"input": "The weather is lovely today."},
              "two": {"input": ["It is sunny outside.", "He drove to the stadium."], "encoding_format": "base64"},
              "short": {"input": "It is sunny outside.", "dimensions": 8}}
    lines = [{"custom_id": custom_id, "method": "POST", "url": "/v1/embeddings", "body": {"model": MINILM_NAME, **body}}
             for custom_id, body in bodies.items()]
    lines.append({"custom_id": "empty", "method": "POST", "url": "/v1/embeddings",
                  "body": {"model": MINILM_NAME, "input": []}})
    uploaded = client.files.create(file=("embeddings.jsonl", io.BytesIO(jsonl(lines))), purpose="batch")
    batch = _wait(client, client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings",
                                                completion_window="24h").id)
    assert batch.status == "completed" and (batch.request_counts.completed, batch.request_counts.failed) == (3, 1)
    output_lines = client.files.content(batch.output_file_id).text.splitlines()
    outputs = {line["custom_id"]: line for line in map(json.loads, output_lines)}
    for custom_id, body in bodies.items():
        answer = outputs[custom_id]["response"]["body"]
        assert outputs[custom_id]["response"]["status_code"] == 200 and answer["object"] == "list"
        direct = client.embeddings.create(model=MINILM_NAME, **{**body, "encoding_format": "float"})
        assert answer["usage"]["prompt_tokens"] == direct.usage.prompt_tokens
        for row, expected in zip(answer["data"], direct.data, strict=True):
            vector = row["embedding"]
            if body.get("encoding_format") == "base64":
                vector = np.frombuffer(base64.b64decode(vector), dtype="<f4")
            np.testing.assert_allclose(vector, expected.embedding, atol=1e-5)
    (error,) = map(json.loads, client.files.content(batch.error_file_id).text.splitlines())
    assert error["custom_id"] == "empty" and error["response"]["status_code"] == 400
    wait_for_idle_pool(server.served.engine)


def test_files_list_pages_with_limit_after_and_order(client):
    created = [client.files.create(file=(f"page-{index}.txt", io.BytesIO(b"x")), purpose="vision")
               for index in range(3)]
    first = client.files.list(purpose="vision", limit=2)
    assert [entry.id for entry in first.data] == [created[2].id, created[1].id] and first.has_more
    every_page = client.files.list(purpose="vision", limit=2)  # the SDK follows has_more with after=last_id
    assert [entry.id for entry in every_page] == [entry.id for entry in reversed(created)]
    oldest = client.files.list(purpose="vision", order="asc", after=created[0].id)
    assert [entry.id for entry in oldest.data] == [created[1].id, created[2].id] and not oldest.has_more
    for bad in ({"limit": 0}, {"order": "sideways"}):
        with pytest.raises(openai.BadRequestError):
            client.files.list(**bad)
    with pytest.raises(openai.NotFoundError):
        client.files.list(after="file-nope")


def test_bad_files_and_ids_get_openai_errors(server, client):
    model = server.served.name
    with pytest.raises(openai.BadRequestError):
        client.files.create(file=("input.jsonl", io.BytesIO(b"{}\n")), purpose="batch_output")
    with pytest.raises(openai.APIStatusError) as too_large:
        client.files.create(file=("big.jsonl", io.BytesIO(b"x" * (1024 * 1024 + 1))), purpose="user_data")
    assert too_large.value.status_code == 413
    for call in (lambda: client.files.retrieve("file-nope"), lambda: client.files.content("file-nope"),
                 lambda: client.files.delete("file-nope"), lambda: client.batches.retrieve("batch_nope"),
                 lambda: client.batches.cancel("batch_nope")):
        with pytest.raises(openai.NotFoundError):
            call()
    user_file = client.files.create(file=("notes.jsonl", io.BytesIO(jsonl([chat_line(model, "a", "hi")]))),
                                    purpose="user_data")
    with pytest.raises(openai.BadRequestError):
        client.batches.create(input_file_id=user_file.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert client.files.delete(user_file.id).deleted
    assert user_file.id not in {entry.id for entry in client.files.list().data}
