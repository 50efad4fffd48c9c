"""`arbi-serve talk` and the Python client's `converse()` against the real server: a spoken question in,
printed events and a spoken reply out."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from arbi_client import ArbiClient
from arbi_client.arbi.v1 import audio_service_pb2 as audio_pb
from arbi_client.arbi.v1 import audio_types_pb2 as audio_types
from arbi_client.audio import Pcm16, audio_requests, pcm16_format, read_wav, write_wav
from tests.conftest import wait_for_idle_pool
from tests.e2e.audio_helpers import silence, spoken
from tests.e2e.serve_process import run_cli
from tests.e2e.test_audio_transcribe import words

QUESTION = "What is the capital of France?"


def test_talk_speaks_a_file_and_writes_the_spoken_reply(served_smollm2, tmp_path: Path) -> None:
    question, reply = tmp_path / "question.wav", tmp_path / "reply.wav"
    write_wav(question, Pcm16(silence(300) + spoken(QUESTION) + silence(700), 16_000))
    completed = run_cli("talk", "--url", served_smollm2.target, "--input", str(question), "--output", str(reply),
                        "--json", "--fast", timeout=240)
    assert completed.returncode == 0, completed.stderr
    events = [json.loads(line) for line in completed.stdout.splitlines()]
    kinds = [next(iter(event)) for event in events]
    assert kinds[0] == "sessionCreated" and kinds[-1] == "responseDone"
    assert "Paris" in events[-1]["responseDone"]["text"]
    with ArbiClient(served_smollm2.target) as client:
        assert "paris" in words(client.transcribe(reply.read_bytes()))
    assert read_wav(reply).sample_rate_hz == 24_000
    wait_for_idle_pool(served_smollm2.served.engine)


def test_talk_refuses_a_file_at_another_rate(served_smollm2, tmp_path: Path) -> None:
    question = tmp_path / "question.wav"
    write_wav(question, Pcm16(bytes(22_050), 22_050))
    completed = run_cli("talk", "--url", served_smollm2.target, "--input", str(question),
                        "--output", str(tmp_path / "reply.wav"))
    assert completed.returncode == 2 and "22050 Hz" in completed.stderr


def test_python_client_converse(served_smollm2) -> None:
    question = Pcm16(silence(300, 24_000) + spoken(QUESTION, 24_000) + silence(700, 24_000), 24_000)
    config = audio_pb.ConverseConfig(input_format=pcm16_format(24_000))
    with ArbiClient(served_smollm2.target) as client:
        events = list(client.converse(config, audio_requests(question, realtime=False), timeout_s=240))
    done = [event.response_done for event in events if event.WhichOneof("event") == "response_done"]
    assert len(done) == 1 and done[0].status == audio_types.RESPONSE_STATUS_COMPLETED
    assert "Paris" in done[0].text
    wait_for_idle_pool(served_smollm2.served.engine)


def test_async_client_converse_transcribe_and_synthesize(served_smollm2, tmp_path: Path) -> None:
    from arbi_client.aio import AsyncArbiClient

    async def typed_question():
        yield audio_pb.ConverseRequest(text=QUESTION)

    async def main() -> tuple[list[audio_pb.ConverseResponse], str]:
        async with AsyncArbiClient(served_smollm2.target) as client:
            config = audio_pb.ConverseConfig(input_format=pcm16_format(16_000))
            events = [event async for event in client.converse(config, typed_question(), timeout_s=240)]
            speech = client.synthesize("The capital of France is Paris.", sample_rate_hz=16_000)
            pcm = b"".join([chunk async for chunk in speech])
            write_wav(tmp_path / "spoken.wav", Pcm16(pcm, 16_000))
            return events, await client.transcribe((tmp_path / "spoken.wav").read_bytes())

    events, heard = asyncio.run(main())
    done = [event.response_done for event in events if event.WhichOneof("event") == "response_done"]
    assert len(done) == 1 and done[0].status == audio_types.RESPONSE_STATUS_COMPLETED
    assert "Paris" in done[0].text
    assert "paris" in words(heard)
    wait_for_idle_pool(served_smollm2.served.engine)
