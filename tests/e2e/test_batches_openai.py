"""Files and Batches through the gateway with the official `openai` SDK and the real SmolLM2: a batch of 60
chat lines answers every custom_id once with the text of the same request sent directly; bad uploads and
unknown ids get OpenAI's errors (400, 404, 413)."""

from __future__ import annotations

import io
import json
import time
from collections import Counter

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

    config = EngineConfig(model=str(smollm2_dir), kv_cache_memory_mib=128)
    server_config = ServerConfig(audio=False, max_file_mib=1, data_dir=str(tmp_path_factory.mktemp("data")))
    server = GrpcServer(build_served_model(config), config=server_config).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(server, tmp_path_factory):
    gateway = GatewayProcess.spawn(["--upstream", server.target, "--http-port", "0"],
                                   tmp_path_factory.mktemp("gateway-batches") / "gateway.log")
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0) as sdk:
        yield sdk
    gateway.stop()


def test_sixty_chat_lines_through_the_sdk(server, client):
    model = server.served.name
    lines = [chat_line(model, f"line-{index}", PROMPTS[index % len(PROMPTS)], MAX_TOKENS) for index in range(LINES)]
    uploaded = client.files.create(file=("input.jsonl", io.BytesIO(jsonl(lines))), purpose="batch")
    assert client.files.retrieve(uploaded.id).bytes == len(jsonl(lines))
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    deadline = time.monotonic() + 300
    while batch.status not in ("completed", "failed", "cancelled", "expired") and time.monotonic() < deadline:
        time.sleep(0.5)
        batch = client.batches.retrieve(batch.id)
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
