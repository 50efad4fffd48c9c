"""The TypeScript Converse example (`clients/typescript/src/converse.ts`), built with `npm run build` and run
as a subprocess against the real server: it speaks a WAV file of a spoken question over the bidirectional
stream, prints each server event as a JSON line and writes the spoken reply to a WAV file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from arbi_client.audio import Pcm16, read_wav, write_wav
from tests.conftest import wait_for_idle_pool
from tests.e2e.audio_helpers import silence, spoken
from tests.e2e.test_audio_transcribe import words

TYPESCRIPT = Path(__file__).resolve().parents[2] / "clients" / "typescript"
QUESTION = "What is the capital of France?"
REPLY_RATE_HZ = 24_000


@pytest.mark.slow
def test_typescript_converse_example_answers_a_spoken_question(served_smollm2, tmp_path: Path) -> None:
    missing = [tool for tool in ("buf", "node", "npm", "espeak-ng") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"toolchain missing: {missing}; run `bash tests/setup.sh`")
    built = subprocess.run(["npm", "run", "--silent", "build"], cwd=TYPESCRIPT, capture_output=True, text=True,
                           timeout=600)
    assert built.returncode == 0, f"build failed:\n{built.stdout}\n{built.stderr}"

    # No trailing silence in the file: the example's open microphone must end the turn.
    question, reply_path = tmp_path / "question.wav", tmp_path / "reply.wav"
    write_wav(question, Pcm16(silence(300) + spoken(QUESTION), 16_000))
    ran = subprocess.run(["node", str(TYPESCRIPT / "dist" / "src" / "converse.js"), "--fast",
                          served_smollm2.target, str(question), str(reply_path)],
                         capture_output=True, text=True, timeout=240, env=dict(os.environ))
    assert ran.returncode == 0, f"example failed:\n{ran.stdout}\n{ran.stderr}"

    events = [json.loads(line) for line in ran.stdout.splitlines()]
    types = [event["type"] for event in events]
    assert types[0] == "session_created" and types[-1] == "response_done", types
    assert types.index("speech_started") < types.index("speech_stopped") < types.index("response_created")
    final = [event for event in events if event["type"] == "input_transcript" and event["is_final"]]
    assert len(final) == 1 and {"capital", "france"} <= set(words(final[0]["text"])), final
    reply_text = "".join(event["delta"] for event in events if event["type"] == "response_text_delta")
    assert "Paris" in reply_text, reply_text
    done = events[-1]
    assert done["status"] == "RESPONSE_STATUS_COMPLETED" and done["text"] == reply_text, done
    assert done["output_token_count"] > 0

    reply = read_wav(reply_path)
    audio_bytes = sum(event["audio_bytes"] for event in events if event["type"] == "response_audio")
    assert reply.sample_rate_hz == REPLY_RATE_HZ and len(reply.data) == audio_bytes > 0
    # The server counts each chunk's whole milliseconds, so each piece's last, partial chunk loses under 1 ms.
    pieces = sum(1 for event in events if event["type"] == "response_audio" and event["text"])
    reply_ms = len(reply.data) // (2 * REPLY_RATE_HZ // 1000)
    assert reply_ms - pieces <= done["audio_sent_ms"] <= reply_ms
    samples = np.frombuffer(reply.data, dtype="<i2").astype(np.float32) / 32768
    assert np.sqrt(np.mean(samples ** 2)) > 0.01, "the reply audio is silent"
    wait_for_idle_pool(served_smollm2.served.engine)
