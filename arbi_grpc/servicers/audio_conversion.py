"""Conversion between AudioService protos and the audio pipeline's settings and events.

Every refusal is an InvalidArgumentError naming the proto field (`config.input_format.sample_rate_hz`).
"""

from __future__ import annotations

from arbi_client.arbi.v1 import audio_service_pb2 as pb
from arbi_client.arbi.v1 import audio_types_pb2 as audio_pb
from arbi_client.arbi.v1 import generate_service_pb2 as generate_pb
from arbi_grpc.audio.settings import (
    DEFAULT_OUTPUT_RATE_HZ,
    DEFAULT_REPLY_TOKENS,
    INPUT_RATES_HZ,
    OUTPUT_RATES_HZ,
    SessionSettings,
)
from arbi_grpc.audio.turns import VadSettings
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.servicers.generate_conversion import sampling_from_proto, stopping_from_proto

_PCM_ENCODINGS = (audio_pb.AUDIO_ENCODING_UNSPECIFIED, audio_pb.AUDIO_ENCODING_PCM16)


def output_rate_from_proto(audio_format: audio_pb.AudioFormat, field: str) -> int:
    """The PCM16 output rate `audio_format` asks for (24000 when unset)."""
    if audio_format.encoding not in _PCM_ENCODINGS:
        raise InvalidArgumentError(f"{field}.encoding", "streamed audio is PCM16 only")
    rate = audio_format.sample_rate_hz or DEFAULT_OUTPUT_RATE_HZ
    if rate not in OUTPUT_RATES_HZ:
        raise InvalidArgumentError(f"{field}.sample_rate_hz", f"must be one of {OUTPUT_RATES_HZ}, got {rate}")
    return rate


def voice_from_proto(voice: str, voices: tuple[str, ...], field: str) -> str:
    name = voice or voices[0]
    if name not in voices:
        raise InvalidArgumentError(field, f"unknown voice {voice!r}; voices: {', '.join(voices)}")
    return name


def _vad_from_proto(detection: audio_pb.TurnDetection) -> VadSettings | None:
    if detection.WhichOneof("mode") == "manual":
        return None
    vad, defaults = detection.server_vad, VadSettings()
    settings = VadSettings(
        threshold=vad.threshold if vad.HasField("threshold") else defaults.threshold,
        prefix_padding_ms=vad.prefix_padding_ms if vad.HasField("prefix_padding_ms")
        else defaults.prefix_padding_ms,
        silence_duration_ms=vad.silence_duration_ms if vad.HasField("silence_duration_ms")
        else defaults.silence_duration_ms,
        interrupt_response=vad.interrupt_response if vad.HasField("interrupt_response")
        else defaults.interrupt_response,
        create_response=vad.create_response if vad.HasField("create_response") else defaults.create_response,
    )
    field = "config.turn_detection.server_vad"
    if not 0 < settings.threshold < 1:
        raise InvalidArgumentError(f"{field}.threshold", f"must be in (0, 1), got {settings.threshold}")
    if not 0 <= settings.prefix_padding_ms <= 5000:
        raise InvalidArgumentError(f"{field}.prefix_padding_ms",
                                   f"must be in [0, 5000], got {settings.prefix_padding_ms}")
    if not 100 <= settings.silence_duration_ms <= 10_000:
        raise InvalidArgumentError(f"{field}.silence_duration_ms",
                                   f"must be in [100, 10000], got {settings.silence_duration_ms}")
    return settings


def settings_from_proto(config: pb.ConverseConfig, voices: tuple[str, ...]) -> SessionSettings:
    """The validated settings of a ConverseConfig; raises InvalidArgumentError naming the field."""
    if config.input_format.encoding not in _PCM_ENCODINGS:
        raise InvalidArgumentError("config.input_format.encoding", "Converse input is PCM16 only")
    if config.input_format.sample_rate_hz not in INPUT_RATES_HZ:
        raise InvalidArgumentError("config.input_format.sample_rate_hz",
                                   f"must be one of {INPUT_RATES_HZ}, got {config.input_format.sample_rate_hz}")
    request = generate_pb.GenerateRequest(sampling=config.sampling, stopping=config.stopping)
    if not config.sampling.HasField("temperature"):
        request.sampling.temperature = 0.0
    try:
        sampling = sampling_from_proto(request)
        stopping = stopping_from_proto(request, DEFAULT_REPLY_TOKENS)
    except InvalidArgumentError as error:
        raise InvalidArgumentError(f"config.{error.field}", error.description) from error
    return SessionSettings(
        model=config.model,
        input_rate_hz=config.input_format.sample_rate_hz,
        output_rate_hz=output_rate_from_proto(config.output_format, "config.output_format"),
        voice=voice_from_proto(config.voice, voices, "config.voice"),
        instructions=config.instructions,
        vad=_vad_from_proto(config.turn_detection),
        sampling=sampling,
        stopping=stopping,
    )


def settings_to_proto(settings: SessionSettings, config: pb.ConverseConfig) -> pb.ConverseConfig:
    """The client's config with the defaults in force filled in."""
    effective = pb.ConverseConfig()
    effective.CopyFrom(config)
    effective.input_format.encoding = audio_pb.AUDIO_ENCODING_PCM16
    effective.output_format.encoding = audio_pb.AUDIO_ENCODING_PCM16
    effective.output_format.sample_rate_hz = settings.output_rate_hz
    effective.voice = settings.voice
    effective.sampling.temperature = settings.sampling.temperature
    effective.stopping.max_output_tokens = settings.stopping.max_output_tokens
    if settings.vad is None:
        effective.turn_detection.manual.SetInParent()
    else:
        vad = effective.turn_detection.server_vad
        vad.threshold = settings.vad.threshold
        vad.prefix_padding_ms = settings.vad.prefix_padding_ms
        vad.silence_duration_ms = settings.vad.silence_duration_ms
        vad.interrupt_response = settings.vad.interrupt_response
        vad.create_response = settings.vad.create_response
    return effective
