"""AudioService.Transcribe and Synthesize on the real server: recorded human speech within the word error
rate bound, synthesized speech that transcribes back, and precise errors for bad input."""

from __future__ import annotations

import re
import sys

import grpc
import pytest
from grpc_status import rpc_status

from arbi_client.arbi.v1 import audio_service_pb2 as pb
from arbi_client.arbi.v1 import audio_types_pb2 as audio_pb
from arbi_grpc.audio.pcm import Audio, pcm16_to_float, write_wav
from tests.e2e.audio_helpers import field_of, librivox_clips

MAX_WORD_ERROR_RATE = 0.15


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z' ]", " ", text.lower().replace("-", " ")).split()


def edit_distance(reference: list[str], hypothesis: list[str]) -> int:
    row = list(range(len(hypothesis) + 1))
    for i, ref_word in enumerate(reference, 1):
        previous, row[0] = row[0], i
        for j, hyp_word in enumerate(hypothesis, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ref_word != hyp_word))
    return row[-1]


def test_word_error_rate_on_recorded_speech(audio_stub) -> None:
    errors = reference_words = 0
    for wav, reference in librivox_clips():
        response = audio_stub.Transcribe(pb.TranscribeRequest(audio=wav.read_bytes()))
        errors += edit_distance(words(reference), words(response.text))
        reference_words += len(words(reference))
        assert response.language == "en" and response.audio_duration_ms > 2000
    rate = errors / reference_words
    print(f"word error rate {rate:.1%} over {reference_words} words", file=sys.stderr)
    assert rate <= MAX_WORD_ERROR_RATE


def test_synthesized_speech_transcribes_back(audio_stub) -> None:
    text = "The capital of France is Paris. It is a beautiful city."
    chunks = list(audio_stub.Synthesize(pb.SynthesizeRequest(
        text=text, output_format=audio_pb.AudioFormat(sample_rate_hz=16_000))))
    assert [chunk.text for chunk in chunks if chunk.text] == ["The capital of France", "is Paris.",
                                                              "It is a beautiful city."]
    assert [chunk.start_ms for chunk in chunks] == sorted(chunk.start_ms for chunk in chunks)
    pcm = b"".join(chunk.audio for chunk in chunks)
    back = audio_stub.Transcribe(pb.TranscribeRequest(
        audio=pcm, format=audio_pb.AudioFormat(encoding=audio_pb.AUDIO_ENCODING_PCM16, sample_rate_hz=16_000)))
    assert {"capital", "paris", "beautiful", "city"} <= set(words(back.text))
    as_wav = write_wav(Audio(pcm16_to_float(pcm, "pcm"), 16_000))
    assert "paris" in words(audio_stub.Transcribe(pb.TranscribeRequest(audio=as_wav)).text)


def _refusal(call, request) -> tuple[grpc.StatusCode, str]:
    """The code and the field named by the refusal of `request`."""
    with pytest.raises(grpc.RpcError) as caught:
        result = call(request)
        if not isinstance(result, pb.TranscribeResponse):
            list(result)
    return caught.value.code(), field_of(rpc_status.from_call(caught.value))


@pytest.mark.parametrize("request_fields, field", [
    ({}, "audio"),
    ({"audio": b"ID3\x03 this is an mp3, not a wav file"}, "audio"),
    ({"audio": b"\x01\x02\x03", "format": audio_pb.AudioFormat(
        encoding=audio_pb.AUDIO_ENCODING_PCM16, sample_rate_hz=16_000)}, "audio"),
    ({"audio": b"\x00\x00", "format": audio_pb.AudioFormat(
        encoding=audio_pb.AUDIO_ENCODING_PCM16, sample_rate_hz=12_345)}, "format.sample_rate_hz"),
    ({"audio": write_wav(Audio(pcm16_to_float(bytes(3200), "pcm"), 16_000)), "language": "fr"}, "language"),
])
def test_transcribe_refuses_bad_input(audio_stub, request_fields, field) -> None:
    code, named = _refusal(audio_stub.Transcribe, pb.TranscribeRequest(**request_fields))
    assert (code, named) == (grpc.StatusCode.INVALID_ARGUMENT, field)


@pytest.mark.parametrize("request_fields, field", [
    ({"text": "   "}, "text"),
    ({"text": "x" * 4097}, "text"),
    ({"text": "hello", "voice": "nobody"}, "voice"),
    ({"text": "hello", "output_format": audio_pb.AudioFormat(sample_rate_hz=44_100)},
     "output_format.sample_rate_hz"),
    ({"text": "hello", "output_format": audio_pb.AudioFormat(encoding=audio_pb.AUDIO_ENCODING_WAV)},
     "output_format.encoding"),
])
def test_synthesize_refuses_bad_input(audio_stub, request_fields, field) -> None:
    code, named = _refusal(audio_stub.Synthesize, pb.SynthesizeRequest(**request_fields))
    assert (code, named) == (grpc.StatusCode.INVALID_ARGUMENT, field)


def test_no_gpl_library_is_loaded(audio_stub) -> None:
    """The recognizer works without faster-whisper's PyAV (which bundles GPL codecs) or libespeak-ng."""
    audio_stub.Transcribe(pb.TranscribeRequest(audio=librivox_clips()[1][0].read_bytes()))
    list(audio_stub.Synthesize(pb.SynthesizeRequest(text="Hello there.")))
    assert "av" not in sys.modules and "faster_whisper" not in sys.modules
    with open("/proc/self/maps") as maps:
        libraries = maps.read()
    assert "libespeak" not in libraries and "libx264" not in libraries and "libavcodec" not in libraries


def test_the_loaded_models_memory_is_a_gauge(audio_stub, served_smollm2) -> None:
    from arbi_grpc.audio.memory import estimated_audio_component

    audio_stub.Synthesize(pb.SynthesizeRequest(text="Hello.")).next()  # the models are loaded by now
    gauge = served_smollm2.metrics.registry.get_sample_value("arbi_audio_models_memory_bytes")
    assert gauge >= estimated_audio_component().num_bytes
