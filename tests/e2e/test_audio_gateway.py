"""The gateway's OpenAI audio routes with the official `openai` SDK: transcriptions of a recorded clip in
each response format, streamed speech that transcribes back, and OpenAI errors for bad input."""

from __future__ import annotations

from collections.abc import Iterator

import json
import urllib.error
import urllib.request

import openai
import pytest
from arbi_gateway.process import GatewayProcess

from arbi_grpc.audio.pcm import pcm16_to_float, read_wav
from tests.e2e.audio_helpers import librivox_clips
from tests.e2e.test_audio_transcribe import words


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0) as sdk:
        yield sdk


def test_transcription_formats(client: openai.OpenAI) -> None:
    wav, _ = librivox_clips()[1]  # "he was not an ill disposed young man"
    with wav.open("rb") as file:
        as_json = client.audio.transcriptions.create(model="whisper-1", file=file)
    assert {"he", "was", "not", "young", "man"} <= set(words(as_json.text))
    as_text = client.audio.transcriptions.create(model="whisper-1", file=wav, response_format="text",
                                                 language="en")
    assert as_text.strip() == as_json.text
    verbose = client.audio.transcriptions.create(model="whisper-1", file=wav, response_format="verbose_json")
    assert verbose.text == as_json.text and 2.9 < verbose.duration < 3.1 and verbose.language == "english"


def test_streamed_speech_transcribes_back(client: openai.OpenAI) -> None:
    text = "The capital of France is Paris. It lies on the Seine."
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice="joe", input=text,
                                                            response_format="wav") as response:
        assert response.headers["content-type"] == "audio/wav"
        chunks = list(response.iter_bytes(4096))
    wav = b"".join(chunks)
    assert wav[:4] == b"RIFF" and int.from_bytes(wav[24:28], "little") == 24_000
    audio = read_wav(wav_with_sizes(wav), "wav")
    assert audio.duration_ms > 2000
    back = client.audio.transcriptions.create(model="whisper-1", file=("reply.wav", wav_with_sizes(wav)))
    assert {"paris", "capital"} <= set(words(back.text))
    pcm = client.audio.speech.create(model="tts-1", voice="joe", input="Hello.", response_format="pcm")
    assert len(pcm.content) % 2 == 0 and len(pcm_samples := pcm16_to_float(pcm.content, "pcm")) > 2400
    assert abs(pcm_samples).max() > 0.05


def wav_with_sizes(streamed: bytes) -> bytes:
    """The streamed WAV with its real sizes written in (as a player does once the stream ends)."""
    return (streamed[:4] + (len(streamed) - 8).to_bytes(4, "little") + streamed[8:40]
            + (len(streamed) - 44).to_bytes(4, "little") + streamed[44:])


@pytest.mark.parametrize("call, param", [
    (lambda c: c.audio.transcriptions.create(model="whisper-1", file=("notes.txt", b"plain text, not audio")),
     "file"),
    (lambda c: c.audio.transcriptions.create(model="whisper-1", file=librivox_clips()[1][0], language="de"),
     "language"),
    (lambda c: c.audio.transcriptions.create(model="whisper-1", file=librivox_clips()[1][0],
                                             response_format="srt"), "response_format"),
    (lambda c: c.audio.speech.create(model="tts-1", voice="alloy", input="Hello."), "voice"),
    (lambda c: c.audio.speech.create(model="tts-1", voice="joe", input="Hello.", response_format="mp3"),
     "response_format"),
    (lambda c: c.audio.speech.create(model="tts-1", voice="joe", input=""), "input"),
])
def test_bad_input_is_a_400_naming_the_parameter(client: openai.OpenAI, call, param) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        call(client)
    assert caught.value.body["param"] == param


def test_transcription_needs_a_multipart_upload(gateway: GatewayProcess) -> None:
    request = urllib.request.Request(gateway.url + "/v1/audio/transcriptions", method="POST",
                                     data=json.dumps({"file": "x", "model": "whisper-1"}).encode(),
                                     headers={"content-type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    assert caught.value.code == 400 and json.loads(caught.value.read())["error"]["param"] == "file"
