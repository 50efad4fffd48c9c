"""AudioService: Converse (a spoken conversation, `audio_converse.py`), Transcribe and Synthesize.

The audio models are the process's `AudioModels`, loaded by the first call (or at boot); without the
audio packages every RPC fails with FAILED_PRECONDITION naming the extra to install.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc

from arbi_client.arbi.v1 import audio_service_pb2 as pb
from arbi_client.arbi.v1 import audio_service_pb2_grpc as pb_grpc
from arbi_client.arbi.v1 import audio_types_pb2 as audio_pb
from arbi_grpc.audio.engine_reply import EngineReplies
from arbi_grpc.audio.metrics import AudioMetrics
from arbi_grpc.audio.models import AudioModels
from arbi_grpc.audio.pcm import Audio, float_to_pcm16, pcm16_to_float, read_wav, resample
from arbi_grpc.audio.splitter import ClauseSplitter
from arbi_grpc.audio.vad import VAD_SAMPLE_RATE_HZ
from arbi_grpc.auth.caller import request_tenant
from arbi_grpc.errors import ArbiError, InvalidArgumentError
from arbi_grpc.model_host import ModelHost
from arbi_grpc.servicers.audio_conversion import output_rate_from_proto, settings_from_proto, voice_from_proto
from arbi_grpc.servicers.audio_converse import ConverseSession
from arbi_grpc.servicers.status import abort_with

MAX_TRANSCRIBE_MS = 10 * 60 * 1000
MAX_SYNTHESIZE_CHARS = 4096
TRANSCRIBE_RATES_HZ = (8_000, 16_000, 22_050, 24_000, 44_100, 48_000)
SYNTHESIS_CHUNK_MS = 200


def audio_of_request(request: pb.TranscribeRequest) -> Audio:
    """The request's audio as samples; raises InvalidArgumentError naming the field."""
    if not request.audio:
        raise InvalidArgumentError("audio", "no audio; send a WAV file or PCM16 samples")
    encoding = request.format.encoding
    if encoding == audio_pb.AUDIO_ENCODING_PCM16:
        rate = request.format.sample_rate_hz
        if rate not in TRANSCRIBE_RATES_HZ:
            raise InvalidArgumentError("format.sample_rate_hz", f"must be one of {TRANSCRIBE_RATES_HZ}, got {rate}")
        audio = Audio(pcm16_to_float(request.audio, "audio"), rate)
    else:
        audio = read_wav(request.audio, "audio")
    if audio.duration_ms > MAX_TRANSCRIBE_MS:
        raise InvalidArgumentError("audio", f"at most {MAX_TRANSCRIBE_MS // 60000} minutes, got "
                                   f"{audio.duration_ms / 60000:.1f}")
    if request.language not in ("", "en"):
        raise InvalidArgumentError("language", f"the bundled recognizer knows English ('en') only, got "
                                   f"{request.language!r}")
    return audio


class AudioServicer(pb_grpc.AudioServiceServicer):
    def __init__(self, host: ModelHost, models: AudioModels, metrics: AudioMetrics) -> None:
        self._host = host
        self._models = models
        self._metrics = metrics
        self._replies = EngineReplies(host)

    async def Converse(  # noqa: N802 (gRPC method name)
        self, request_iterator: AsyncIterator[pb.ConverseRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ConverseResponse]:
        requests = request_iterator.__aiter__()
        try:
            first = await anext(requests, None)
            if first is None or first.WhichOneof("event") != "config":
                raise InvalidArgumentError("event", "the first ConverseRequest must be a config")
            settings = settings_from_proto(first.config, self._models.voice_names)
            loaded = await self._models.loaded()
            self._host.admit(settings.model)
        except ArbiError as error:
            await abort_with(context, error)
            return
        session = ConverseSession(settings, loaded, self._models, self._replies, self._metrics, request_tenant(""))
        async for event in session.run(requests, first.config, context):
            yield event

    async def Transcribe(  # noqa: N802 (gRPC method name)
        self, request: pb.TranscribeRequest, context: grpc.aio.ServicerContext
    ) -> pb.TranscribeResponse:
        try:
            audio = audio_of_request(request)
            loaded = await self._models.loaded()
        except ArbiError as error:
            await abort_with(context, error)
        samples = resample(audio.samples, audio.sample_rate_hz, VAD_SAMPLE_RATE_HZ)
        started = time.monotonic()
        text = await self._models.recognize(lambda: loaded.recognizer.transcribe(samples))
        self._metrics.recognition.observe(time.monotonic() - started)
        return pb.TranscribeResponse(text=text, language="en", audio_duration_ms=audio.duration_ms)

    async def Synthesize(  # noqa: N802 (gRPC method name)
        self, request: pb.SynthesizeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.SynthesizeResponse]:
        try:
            if not request.text.strip():
                raise InvalidArgumentError("text", "no text to speak")
            if len(request.text) > MAX_SYNTHESIZE_CHARS:
                raise InvalidArgumentError("text", f"at most {MAX_SYNTHESIZE_CHARS} characters, got "
                                           f"{len(request.text)}")
            voice = voice_from_proto(request.voice, self._models.voice_names, "voice")
            rate = output_rate_from_proto(request.output_format, "output_format")
            loaded = await self._models.loaded()
        except ArbiError as error:
            await abort_with(context, error)
            return
        synthesizer = loaded.voices[voice]
        splitter = ClauseSplitter()
        pieces = splitter.push(request.text + " ")
        if tail := splitter.flush():
            pieces.append(tail)
        sent_ms = 0
        chunk_samples = rate * SYNTHESIS_CHUNK_MS // 1000
        next_piece = self._synthesize_piece(synthesizer, pieces[0])
        for index, piece in enumerate(pieces):
            samples = resample(await next_piece, synthesizer.sample_rate_hz, rate)
            if index + 1 < len(pieces):  # synthesize the next piece while this one is sent
                next_piece = asyncio.ensure_future(self._synthesize_piece(synthesizer, pieces[index + 1]))
            for offset in range(0, len(samples), chunk_samples):
                chunk = samples[offset:offset + chunk_samples]
                yield pb.SynthesizeResponse(audio=float_to_pcm16(chunk), text=piece if offset == 0 else "",
                                            start_ms=sent_ms)
                sent_ms += 1000 * len(chunk) // rate

    async def _synthesize_piece(self, synthesizer, text: str):
        started = time.monotonic()
        samples = await self._models.synthesize(lambda: synthesizer.synthesize(text))
        self._metrics.synthesis.observe(time.monotonic() - started)
        return samples
