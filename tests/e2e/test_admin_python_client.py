"""The Python client package: its runnable example (a streamed chat and the admin server description) as a
subprocess, the asyncio client on the same calls, and a client-only import that never loads torch."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from arbi_client import AsyncArbiClient
from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.requests import chat_request
from arbi_grpc import __version__

EXAMPLE = Path(__file__).resolve().parents[2] / "clients" / "python" / "example.py"
QUESTION = "What is the capital of France?"


def test_example_streams_a_chat_and_reads_server_info(served_smollm2) -> None:
    env = {**os.environ, "ARBI_ADMIN_TOKEN": served_smollm2.credentials.admin_token}
    ran = subprocess.run([sys.executable, str(EXAMPLE), served_smollm2.target], capture_output=True,
                         text=True, timeout=300, env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    answer, finish, server = ran.stdout.splitlines()[-3:]
    assert "Paris" in answer
    assert finish.startswith("finish: FINISH_REASON_EOS_TOKEN, prompt tokens: ")
    assert server.startswith(f"server: arbi-serve {__version__}, model {served_smollm2.served.name} ")
    assert "(LlamaForCausalLM, " in server and "kv codec none" in server
    without = subprocess.run([sys.executable, str(EXAMPLE), served_smollm2.target], capture_output=True,
                             text=True, timeout=60, env={**env, "ARBI_ADMIN_TOKEN": ""})
    assert without.returncode == 2 and "ARBI_ADMIN_TOKEN" in without.stderr


def test_async_client(served_smollm2) -> None:
    async def scenario() -> tuple:
        token = served_smollm2.credentials.admin_token
        async with AsyncArbiClient(served_smollm2.target, admin_token=token) as client:
            reply = "".join([piece async for piece in client.stream_chat(
                [{"role": "user", "content": QUESTION}], max_output_tokens=16, temperature=0.0)])
            ids = await client.tokenize("Hello world")
            text = await client.detokenize(ids)
            counted = await client.count_tokens(messages=[{"role": "user", "content": QUESTION}])
            info = await client.get_server_info()
            call = client.session()
            await call.write(pb.SessionRequest(start=pb.StartGeneration(
                generation_id="a", request=chat_request([{"role": "user", "content": QUESTION}],
                                                        max_output_tokens=16, temperature=0.0))))
            await call.done_writing()
            session_text = "".join([r.output.text async for r in call])
            return reply, ids, text, counted, info, session_text

    reply, ids, text, counted, info, session_text = asyncio.run(scenario())
    assert "Paris" in reply and session_text == reply
    assert len(ids) == 2 and text == "Hello world"
    assert counted.token_count > 5 and counted.max_context_tokens == served_smollm2.served.max_model_len
    assert info.version == __version__


def test_the_client_imports_without_torch() -> None:
    probe = "import sys, arbi_client, arbi_grpc.chat_client; print('torch' in sys.modules)"
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "False"
