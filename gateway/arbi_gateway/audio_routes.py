"""OpenAI's audio routes over AudioService: POST /v1/audio/transcriptions (a multipart upload, answered by
Transcribe) and POST /v1/audio/speech (JSON in, audio streamed from Synthesize as it is produced).

Speech is streamed as WAV (a header whose sizes say "unknown", then PCM16 as it comes) or raw PCM16 at
24 kHz mono, OpenAI's `pcm`. Upstream errors keep their HTTP status and name the request's parameter.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from arbi_client.arbi.v1 import audio_service_pb2 as pb
from arbi_client.arbi.v1 import audio_types_pb2 as audio_pb
from arbi_gateway.errors import api_error_of, invalid, status_of_rpc_error
from arbi_gateway.gateway_state import GatewayState
from arbi_gateway.openai_requests import parse_json_object
from arbi_gateway.stream_response import StreamResponse
from arbi_gateway.upstream import RpcKind, forwarded_metadata

log = logging.getLogger(__name__)

_TRANSCRIBE = "/arbi.v1.AudioService/Transcribe"
_SYNTHESIZE = "/arbi.v1.AudioService/Synthesize"
_TRANSCRIPTION_FORMATS = ("json", "text", "verbose_json")
_SPEECH_FORMATS = {"wav": "audio/wav", "pcm": "audio/pcm"}
_SPEECH_RATE_HZ = 24_000
_MAX_UPLOAD_BYTES = 25 * 1024 * 1024  # OpenAI's limit
_TRANSCRIBE_PARAMS = {"audio": "file", "language": "language"}
_SPEECH_PARAMS = {"text": "input", "voice": "voice", "output_format.sample_rate_hz": "response_format"}


def _form_text(form: Any, name: str, default: str = "") -> str:
    value = form.get(name, default)
    if not isinstance(value, str):
        raise invalid(name, f"'{name}' must be a text field")
    return value


async def transcriptions(request: Request) -> Response:
    gateway: GatewayState = request.app.state.gateway
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise invalid("file", "send the audio as multipart/form-data with a 'file' part")
    async with request.form(max_part_size=_MAX_UPLOAD_BYTES) as form:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise invalid("file", "the 'file' part with the audio is required", "missing_required_parameter")
        if not _form_text(form, "model"):
            raise invalid("model", "'model' is required", "missing_required_parameter")
        response_format = _form_text(form, "response_format", "json")
        if response_format not in _TRANSCRIPTION_FORMATS:
            raise invalid("response_format", f"must be one of {', '.join(_TRANSCRIPTION_FORMATS)}")
        language = _form_text(form, "language")
        audio = await upload.read()
    call = gateway.upstream.method(_TRANSCRIBE, RpcKind.UNARY_UNARY, pb.TranscribeRequest.SerializeToString,
                                   pb.TranscribeResponse.FromString)
    try:
        result = await call(pb.TranscribeRequest(audio=audio, language=language),
                            metadata=forwarded_metadata(request.headers))
    except grpc.RpcError as error:
        raise api_error_of(status_of_rpc_error(error), _TRANSCRIBE_PARAMS) from None
    if response_format == "text":
        return PlainTextResponse(result.text + "\n")
    if response_format == "json":
        return JSONResponse({"text": result.text})
    duration_s = result.audio_duration_ms / 1000
    return JSONResponse({"task": "transcribe", "language": "english", "duration": duration_s, "text": result.text,
                         "segments": [{"id": 0, "seek": 0, "start": 0.0, "end": duration_s, "text": result.text}]})


async def speech(request: Request) -> Response:
    gateway: GatewayState = request.app.state.gateway
    body = parse_json_object(await request.body())
    text, voice = body.get("input"), body.get("voice", "")
    if not isinstance(text, str) or not text:
        raise invalid("input", "'input' must be a non-empty string", "missing_required_parameter")
    if not isinstance(voice, str):
        raise invalid("voice", "'voice' must be a string")
    response_format = body.get("response_format", "wav")
    if response_format not in _SPEECH_FORMATS:
        raise invalid("response_format", f"must be one of {', '.join(_SPEECH_FORMATS)} (compressed formats "
                      "are not produced by this server)")
    if body.get("speed", 1.0) != 1.0:
        raise invalid("speed", "only speed 1.0 is supported")
    call = gateway.upstream.method(_SYNTHESIZE, RpcKind.UNARY_STREAM, pb.SynthesizeRequest.SerializeToString,
                                   pb.SynthesizeResponse.FromString)
    stream = call(pb.SynthesizeRequest(text=text, voice=voice, output_format=audio_pb.AudioFormat(
        encoding=audio_pb.AUDIO_ENCODING_PCM16, sample_rate_hz=_SPEECH_RATE_HZ)),
        metadata=forwarded_metadata(request.headers))
    try:
        first = await stream.read()
    except grpc.RpcError as error:
        raise api_error_of(status_of_rpc_error(error), _SPEECH_PARAMS) from None
    header = _wav_header(_SPEECH_RATE_HZ) if response_format == "wav" else b""
    return StreamResponse(_audio(stream, first, header), _SPEECH_FORMATS[response_format])


async def _audio(stream: Any, first: Any, header: bytes) -> AsyncIterator[bytes]:
    try:
        if header:
            yield header
        message = first
        while message is not grpc.aio.EOF:
            yield message.audio
            message = await stream.read()
    except grpc.RpcError as error:  # the status line is sent already: the body ends early
        log.warning("speech stream failed after its first bytes: %s", status_of_rpc_error(error).message)
    finally:
        stream.cancel()


def _wav_header(sample_rate_hz: int) -> bytes:
    """A mono PCM16 WAV header with the sizes set to the maximum, as streaming encoders write them."""
    unknown = (0xFFFFFFFF).to_bytes(4, "little")
    return (b"RIFF" + unknown + b"WAVEfmt " + (16).to_bytes(4, "little") + (1).to_bytes(2, "little")
            + (1).to_bytes(2, "little") + sample_rate_hz.to_bytes(4, "little")
            + (2 * sample_rate_hz).to_bytes(4, "little") + (2).to_bytes(2, "little")
            + (16).to_bytes(2, "little") + b"data" + unknown)
