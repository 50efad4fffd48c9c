"""One Converse stream: input audio through VAD and turn-taking into recognized user turns, each answered
by a ReplyTurn, with barge-in, client controls and recoverable errors as events.

The reader handles client messages in order on the event loop (the VAD runs inline, about 0.3 ms a
frame); recognition and synthesis run on the shared workers of `AudioModels`. Turns are answered in
order: each turn's task waits for the previous one. While the user speaks, partial transcripts are made
when the recognizer is idle. When the speech pauses, the turn is answered speculatively: the final
recognition starts (or is the partial one in progress, when that reaches past the end of the speech),
and once it is done (and no earlier turn is still being answered) so does the reply,
held (`ReplyTurn`'s `held`): it generates and synthesizes but emits nothing. If the pause becomes the end
of the turn, the client gets speech_stopped, input_committed and the final transcript as without
speculation, then the held reply's events; if the user speaks again first, the held reply is discarded
(its engine request cancelled at once) and the turn goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import grpc
import numpy as np

from arbi_client.arbi.v1 import audio_service_pb2 as pb
from arbi_client.arbi.v1 import audio_types_pb2 as audio_pb
from arbi_grpc.audio.conversation import Conversation
from arbi_grpc.audio.engine_reply import EngineReplies
from arbi_grpc.audio.input_buffer import InputBuffer, ms_to_samples, samples_to_ms
from arbi_grpc.audio.metrics import AudioMetrics
from arbi_grpc.audio.models import AudioModels, LoadedModels
from arbi_grpc.audio.pcm import pcm16_to_float, resample
from arbi_grpc.audio.settings import SessionSettings
from arbi_grpc.audio.turns import (
    MIN_SPEECH_MS,
    SpeechEnded,
    SpeechPaused,
    SpeechResumed,
    SpeechStarted,
    TurnDetector,
    TurnEvent,
    VadSettings,
)
from arbi_grpc.audio.vad import VAD_SAMPLE_RATE_HZ
from arbi_grpc.errors import ArbiError, InvalidArgumentError, ResourceExhaustedError
from arbi_grpc.model_host import FailedPreconditionError
from arbi_grpc.servicers.audio_conversion import settings_from_proto, settings_to_proto
from arbi_grpc.servicers.audio_reply import ReplyTurn
from arbi_grpc.servicers.status import abort_with, status_of

log = logging.getLogger(__name__)

TURN_TAIL_MS = 100  # audio kept after the last speech frame, so the last word is not clipped
PARTIAL_EVERY_MS = 1000
MAX_BUFFER_MS = 120_000  # uncommitted input a session holds at most
_CLOSED = object()


@dataclass(frozen=True)
class _Partial:
    """A partial recognition of the turn `item_id`'s audio up to `end` (a sample of the input timeline)."""

    item_id: str
    end: int
    recognition: asyncio.Task[str]


@dataclass
class _Speculation:
    """The answer to a paused turn, begun before the pause is known to end it: the final recognition of the
    audio up to `end` (a sample of the input timeline), then the held reply, if one could start."""

    end: int
    recognition: asyncio.Task[str]
    reply: ReplyTurn | None = None

    def discard(self) -> None:
        if self.reply is not None:
            self.reply.discard()


@dataclass(frozen=True)
class _Failed:
    """The session cannot go on (a fault of the server, not of the client's input)."""

    error: Exception


class ConverseSession:
    def __init__(self, settings: SessionSettings, models: LoadedModels, audio: AudioModels,
                 replies: EngineReplies, metrics: AudioMetrics, tenant: str) -> None:
        self.session_id = uuid.uuid4().hex
        self._settings = settings
        self._models = models
        self._audio = audio
        self._replies = replies
        self._metrics = metrics
        self._tenant = tenant
        self._events: asyncio.Queue = asyncio.Queue()
        self._conversation = Conversation(settings.instructions)
        self._buffer = InputBuffer()
        self._vad = models.vad.new_stream()
        self._turns = TurnDetector(settings.vad or VadSettings())
        self._item_id = ""  # the user turn being spoken
        self._turn_start = 0  # its first sample (prefix padding included)
        self._speculation: _Speculation | None = None
        self._partial: _Partial | None = None
        self._last_partial_end = 0
        self._reply: ReplyTurn | None = None
        self._last_turn: asyncio.Task | None = None
        self._client_done = False

    def emit(self, event: pb.ConverseResponse) -> None:
        self._events.put_nowait(event)

    async def run(self, requests: AsyncIterator[pb.ConverseRequest], config: pb.ConverseConfig,
                  context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ConverseResponse]:
        self.emit(pb.ConverseResponse(session_created=pb.SessionCreated(
            session_id=self.session_id, config=settings_to_proto(self._settings, config))))
        reader = asyncio.create_task(self._read(requests))
        try:
            while (event := await self._events.get()) is not _CLOSED:
                if isinstance(event, _Failed):
                    await abort_with(context, ArbiError(f"the audio session failed: {event.error}"))
                yield event
        finally:
            reader.cancel()
            self._drop_speculation()
            if self._reply is not None:
                self._reply.stop(audio_pb.RESPONSE_STATUS_CANCELLED)
            if self._last_turn is not None:
                self._last_turn.cancel()

    async def _read(self, requests: AsyncIterator[pb.ConverseRequest]) -> None:
        try:
            async for message in requests:
                try:
                    self._handle(message)
                except ArbiError as error:
                    self.emit(pb.ConverseResponse(error=status_of(error)))
            self._client_done = True
            self._commit_unfinished_speech()
            if self._last_turn is not None:
                await self._last_turn
        except Exception as error:  # a fault: the writer ends the stream with INTERNAL
            log.exception("converse session %s failed", self.session_id)
            self._events.put_nowait(_Failed(error))
        finally:
            self._events.put_nowait(_CLOSED)

    def _handle(self, message: pb.ConverseRequest) -> None:
        event = message.WhichOneof("event")
        if event not in ("audio", "playback"):
            self._drop_speculation()  # any other message may change what the held reply would answer
        if event == "audio":
            self._on_audio(message.audio)
        elif event == "text":
            self._conversation.add("user", message.text)
            self._chain(lambda: self._respond("", None))
        elif event == "commit_input":
            self._commit_input()
        elif event == "clear_input":
            self._buffer.drop_before(self._buffer.end)
            self._turns.reset()
            self._item_id = ""
        elif event == "create_response":
            if self._reply is not None and not self._reply.finished.is_set():
                raise FailedPreconditionError("a response is in progress; cancel it first (cancel_response)")
            self._chain(lambda: self._respond("", None))
        elif event == "cancel_response":
            if self._reply is not None:
                self._reply.stop(audio_pb.RESPONSE_STATUS_CANCELLED)
        elif event == "playback":
            if self._reply is not None and self._reply.response_id == message.playback.response_id:
                self._reply.report_played(message.playback.played_ms)
        elif event == "config":
            self._update(message.config)
        else:
            raise InvalidArgumentError("event", "each ConverseRequest sets one event")

    def _update(self, config: pb.ConverseConfig) -> None:
        settings = settings_from_proto(config, self._audio.voice_names)
        if settings.vad is None or self._settings.vad is None:
            self._turns.reset()
        self._settings = settings
        self._turns.settings = settings.vad or VadSettings()
        self._conversation.instructions = settings.instructions
        self.emit(pb.ConverseResponse(session_updated=pb.SessionUpdated(config=settings_to_proto(settings, config))))

    # -- input audio and turns -----------------------------------------------------------------------

    def _on_audio(self, data: bytes) -> None:
        if len(data) > self._settings.max_chunk_bytes:
            raise InvalidArgumentError(
                "audio", f"at most {self._settings.max_chunk_bytes} bytes (1 s at "
                f"{self._settings.input_rate_hz} Hz) per message, got {len(data)}; the chunk was dropped")
        samples = resample(pcm16_to_float(data, "audio"), self._settings.input_rate_hz, VAD_SAMPLE_RATE_HZ)
        if samples_to_ms(self._buffer.held_count + len(samples)) > MAX_BUFFER_MS:
            raise ResourceExhaustedError(
                f"the input buffer holds {MAX_BUFFER_MS // 1000} s of uncommitted audio; commit or clear it "
                "(the chunk was dropped)")
        frames = self._buffer.append(samples)
        vad = self._settings.vad
        if vad is None:
            return
        for frame in frames:
            for event in self._turns.push(self._vad.speech_probability(frame)):
                self._on_turn_event(event, vad)
        if self._turns.in_speech and self._speculation is None:  # no partials while a pause is answered
            self._maybe_partial()
        elif not self._item_id:
            self._buffer.trim_to(vad.prefix_padding_ms)

    def _on_turn_event(self, event: TurnEvent, vad: VadSettings) -> None:
        if isinstance(event, SpeechStarted):
            self._item_id = uuid.uuid4().hex
            self._turn_start = ms_to_samples(max(0, event.onset_ms - vad.prefix_padding_ms))
            self._last_partial_end = self._turn_start
            self.emit(pb.ConverseResponse(speech_started=pb.SpeechStarted(
                item_id=self._item_id, audio_start_ms=event.onset_ms)))
            if vad.interrupt_response and self._reply is not None and not self._reply.finished.is_set():
                self._metrics.interruptions.inc()
                self._reply.stop(audio_pb.RESPONSE_STATUS_INTERRUPTED, event.confirmed_ms)
        elif isinstance(event, SpeechPaused):
            self._drop_speculation()
            self._speculate(ms_to_samples(event.speech_end_ms + TURN_TAIL_MS))
        elif isinstance(event, SpeechResumed):
            self._drop_speculation("resumed")
        elif isinstance(event, SpeechEnded):
            self.emit(pb.ConverseResponse(speech_stopped=pb.SpeechStopped(
                item_id=self._item_id, audio_end_ms=event.speech_end_ms)))
            end = ms_to_samples(event.speech_end_ms + TURN_TAIL_MS)
            speculation, self._speculation = self._speculation, None
            if speculation is not None and (not event.is_turn or speculation.end != end):
                self._discard(speculation, "dropped")
                speculation = None
            if event.is_turn:
                self._commit(self._buffer.between(self._turn_start, end), end, speculation, "server_vad")
            self._item_id = ""

    def _speculate(self, end: int) -> None:
        """Recognizes the turn up to `end` and, when that gives text, starts its reply held. A partial
        recognition of this turn that reaches past `end` (into the silence) is the final one."""
        item_id, settings, partial = self._item_id, self._settings, self._partial
        if partial is not None and partial.item_id == item_id and partial.end >= end:
            recognition = partial.recognition
        else:
            recognition = asyncio.create_task(self._recognize(self._buffer.between(self._turn_start, end)))
        speculation = self._speculation = _Speculation(end, recognition)

        def reply_when_recognized(task: asyncio.Task[str]) -> None:
            if self._speculation is not speculation or task.cancelled() or task.exception() or not task.result():
                return
            if settings.vad is None or not settings.vad.create_response:
                return
            if self._last_turn is not None and not self._last_turn.done():
                return  # an earlier turn's reply will change the history first
            messages = [*self._conversation.messages(), {"role": "user", "content": task.result()}]
            speculation.reply = self._new_reply(item_id, settings, messages, None, held=True)
            speculation.reply.start()

        recognition.add_done_callback(reply_when_recognized)

    def _drop_speculation(self, outcome: str = "dropped") -> None:
        speculation, self._speculation = self._speculation, None
        if speculation is not None:
            self._discard(speculation, outcome)

    def _discard(self, speculation: _Speculation, outcome: str) -> None:
        if speculation.reply is not None:
            self._metrics.speculative_replies.labels(outcome).inc()
        speculation.discard()

    def _maybe_partial(self) -> None:
        """A partial transcript of the turn so far, when the recognizer is idle."""
        if self._buffer.end - self._last_partial_end < ms_to_samples(PARTIAL_EVERY_MS):
            return
        if self._audio.recognition_busy or (self._partial is not None and not self._partial.recognition.done()):
            return
        self._last_partial_end = end = self._buffer.end
        recognition = asyncio.create_task(self._recognize(self._buffer.between(self._turn_start, end)))
        self._partial = _Partial(self._item_id, end, recognition)
        recognition.add_done_callback(lambda task, item_id=self._item_id: self._send_partial(item_id, task))

    def _send_partial(self, item_id: str, recognition: asyncio.Task[str]) -> None:
        if recognition.cancelled():
            return
        if (error := recognition.exception()) is not None:
            log.warning("partial recognition failed in session %s: %s", self.session_id, error)
            return
        if recognition.result() and item_id == self._item_id:
            self.emit(pb.ConverseResponse(input_transcript=pb.InputTranscript(
                item_id=item_id, text=recognition.result())))

    def _commit_input(self) -> None:
        start = self._turn_start if self._item_id else 0
        samples = self._buffer.between(start, self._buffer.end) if self._item_id else self._buffer.held()
        if len(samples) == 0:
            raise InvalidArgumentError("commit_input", "the input audio buffer is empty; send audio first")
        self._turns.reset()
        self._commit(samples, self._buffer.end, None, "manual")

    def _commit_unfinished_speech(self) -> None:
        """At the end of the client's stream, speech still going on is taken as the last turn; in a pause,
        its speculative answer is the turn's (only silence follows the audio it recognized)."""
        speculation, self._speculation = self._speculation, None
        if self._item_id and self._turns.in_speech:
            end = self._buffer.end
            if samples_to_ms(end - self._turn_start) >= MIN_SPEECH_MS:
                self._commit(self._buffer.between(self._turn_start, end), end, speculation, "end_of_stream")
                return
        if speculation is not None:
            self._discard(speculation, "dropped")

    def _commit(self, samples: np.ndarray, end: int, speculation: _Speculation | None, detection: str) -> None:
        item_id = self._item_id or uuid.uuid4().hex
        self._item_id = ""
        self._buffer.drop_before(end)
        self._metrics.turns.labels(detection).inc()
        self.emit(pb.ConverseResponse(input_committed=pb.InputCommitted(
            item_id=item_id, audio_duration_ms=samples_to_ms(len(samples)))))
        if speculation is None:
            speculation = _Speculation(end, asyncio.create_task(self._recognize(samples)))
        speech_end_s = time.monotonic()
        self._chain(lambda: self._answer_turn(item_id, speculation, speech_end_s))

    # -- answering -----------------------------------------------------------------------------------

    def _chain(self, work: Callable[[], Awaitable[None]]) -> None:
        """Runs `work()` after the previous turn's work, in order."""
        previous = self._last_turn

        async def after_previous() -> None:
            if previous is not None:
                await asyncio.wait([previous])
            await work()

        self._last_turn = asyncio.create_task(after_previous())

    async def _answer_turn(self, item_id: str, speculation: _Speculation, speech_end_s: float) -> None:
        text = await speculation.recognition
        self.emit(pb.ConverseResponse(input_transcript=pb.InputTranscript(
            item_id=item_id, text=text, is_final=True)))
        self._conversation.add("user", text)
        vad = self._settings.vad
        if speculation.reply is not None:
            self._metrics.speculative_replies.labels("kept").inc()
            self._reply = speculation.reply
            self._reply.release(speech_end_s)
            await self._reply.finished.wait()
        elif text and vad is not None and vad.create_response:
            await self._respond(item_id, speech_end_s)

    async def _respond(self, item_id: str, speech_end_s: float | None) -> None:
        self._reply = self._new_reply(item_id, self._settings, None, speech_end_s)
        self._reply.start()
        await self._reply.finished.wait()

    def _new_reply(self, item_id: str, settings: SessionSettings, messages: list[dict[str, str]] | None,
                   speech_end_s: float | None, held: bool = False) -> ReplyTurn:
        """A reply to `messages`, or to the history as it is when the reply starts."""
        return ReplyTurn(
            uuid.uuid4().hex, item_id, settings.output_rate_hz, self._conversation,
            lambda: self._replies.start(settings.model, messages or self._conversation.messages(),
                                        settings.sampling, settings.stopping, self._tenant),
            self._models.voices[settings.voice], self._audio, self._metrics, self.emit, speech_end_s,
            lambda: not self._client_done, held,
        )

    async def _recognize(self, samples: np.ndarray) -> str:
        started = time.monotonic()
        text = await self._audio.recognize(lambda: self._models.recognizer.transcribe(samples))
        self._metrics.recognition.observe(time.monotonic() - started)
        return text
