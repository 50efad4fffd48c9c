"""Converse refuses what it cannot start with a precise status, reports recoverable mistakes as error
events, and stays usable after them."""

from __future__ import annotations

import grpc
import pytest
from grpc_status import rpc_status

from arbi_client.arbi.v1 import audio_service_pb2 as pb
from arbi_client.arbi.v1 import audio_types_pb2 as audio_pb
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from tests.conftest import wait_for_idle_pool
from tests.e2e.audio_helpers import config, field_of, of_kind, replies_of, silence, spoken


def pcm_config(**format_fields) -> pb.ConverseConfig:
    return pb.ConverseConfig(input_format=audio_pb.AudioFormat(**format_fields))


@pytest.mark.parametrize("first, field", [
    (None, "event"),
    (pb.ConverseRequest(audio=bytes(640)), "event"),
    (pb.ConverseRequest(config=pb.ConverseConfig()), "config.input_format.sample_rate_hz"),
    (pb.ConverseRequest(config=pcm_config(sample_rate_hz=44_100)), "config.input_format.sample_rate_hz"),
    (pb.ConverseRequest(config=pcm_config(encoding=audio_pb.AUDIO_ENCODING_WAV, sample_rate_hz=16_000)),
     "config.input_format.encoding"),
    (pb.ConverseRequest(config=config(voice="nobody")), "config.voice"),
    (pb.ConverseRequest(config=config(output_format=audio_pb.AudioFormat(sample_rate_hz=8_000))),
     "config.output_format.sample_rate_hz"),
    (pb.ConverseRequest(config=config(sampling=types_pb.SamplingParameters(temperature=-1))),
     "config.sampling.temperature"),
    (pb.ConverseRequest(config=config(turn_detection=audio_pb.TurnDetection(
        server_vad=audio_pb.ServerVadTurnDetection(threshold=1.5)))),
     "config.turn_detection.server_vad.threshold"),
])
def test_a_stream_without_a_valid_config_ends_with_invalid_argument(audio_stub, first, field) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        list(audio_stub.Converse(iter([] if first is None else [first]), timeout=60))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_of(rpc_status.from_call(caught.value)) == field


def test_recoverable_errors_leave_the_session_usable(audio_stub, served_smollm2) -> None:
    question = silence(200) + spoken("What is the capital of France?") + silence(300)
    manual = config(16_000, turn_detection=audio_pb.TurnDetection(manual=audio_pb.ManualTurnDetection()))
    requests = [
        pb.ConverseRequest(config=manual),
        pb.ConverseRequest(audio=b"\x01\x02\x03"),  # an odd byte count
        pb.ConverseRequest(audio=bytes(2 * 16_000 + 2)),  # more than 1 s
        pb.ConverseRequest(commit_input=pb.CommitInput()),  # nothing to commit yet
        pb.ConverseRequest(config=pcm_config(sample_rate_hz=11_025)),  # an invalid update
        *(pb.ConverseRequest(audio=question[offset:offset + 16_000]) for offset in range(0, len(question), 16_000)),
        pb.ConverseRequest(commit_input=pb.CommitInput()),
        pb.ConverseRequest(create_response=pb.CreateResponse()),
        pb.ConverseRequest(text="What is the capital of Japan?"),
    ]
    events = list(audio_stub.Converse(iter(requests), timeout=240))
    errors = of_kind(events, "error")
    invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert [(error.code, field_of(error)) for error in errors] == [
        (invalid, "audio"), (invalid, "audio"), (invalid, "commit_input"),
        (invalid, "config.input_format.sample_rate_hz"),
    ]
    assert not of_kind(events, "session_updated")
    assert not of_kind(events, "speech_started")  # manual turns: no server VAD
    (transcript,) = of_kind(events, "input_transcript")
    assert transcript.is_final and "france" in transcript.text.lower()
    france, typed = replies_of(events)
    assert "Paris" in france.text and typed.text
    assert france.done.status == typed.done.status == audio_pb.RESPONSE_STATUS_COMPLETED
    # The typed turn is answered with the whole history: both questions and the first reply.
    assert typed.done.usage.prompt_token_count > france.done.usage.prompt_token_count + 10
    wait_for_idle_pool(served_smollm2.served.engine)


def test_uncommitted_audio_is_bounded(audio_stub) -> None:
    manual = config(16_000, turn_detection=audio_pb.TurnDetection(manual=audio_pb.ManualTurnDetection()))
    second = silence(1000)
    requests = [pb.ConverseRequest(config=manual), *(pb.ConverseRequest(audio=second) for _ in range(121)),
                pb.ConverseRequest(clear_input=pb.ClearInput()), pb.ConverseRequest(audio=second)]
    events = list(audio_stub.Converse(iter(requests), timeout=120))
    errors = of_kind(events, "error")
    assert [error.code for error in errors] == [grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]]
    assert "commit or clear" in errors[0].message
