"""One reply of a Converse session, from the engine's first token to the end of its playback.

The reply text streams from the engine; the splitter cuts it into sentences and clauses, which a second
task synthesizes one after the other while the text goes on, sending the audio in short chunks as each
piece is ready. The reply stays in progress until the client has played its audio (its PlaybackReport,
else the real-time estimate), so user speech until then interrupts it. `stop` ends it at once from the
event loop: the engine request is cancelled, synthesis results are dropped, and the assistant's turn in
the history keeps only what was played.

A reply started `held` (a speculative reply, begun before its user turn is certain to have ended)
generates and synthesizes as usual but emits nothing: its events wait, in order, until `release`, and its
audio is sent (and its playback clock starts) only then. `discard` drops a held reply without a trace:
the engine request is cancelled at once, no event is emitted and the history is left as it was.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np

from arbi_client.arbi.v1 import audio_service_pb2 as pb
from arbi_client.arbi.v1 import audio_types_pb2 as audio_pb
from arbi_grpc.audio.conversation import Conversation
from arbi_grpc.audio.engine_reply import ReplyStream, ReplyUsage
from arbi_grpc.audio.metrics import AudioMetrics
from arbi_grpc.audio.models import AudioModels
from arbi_grpc.audio.pcm import float_to_pcm16, resample
from arbi_grpc.audio.playback import PlaybackClock, SpokenPiece, spoken_text
from arbi_grpc.audio.splitter import ClauseSplitter
from arbi_grpc.audio.tts import SpeechSynthesizer
from arbi_grpc.errors import ArbiError
from arbi_grpc.servicers.status import status_of

AUDIO_CHUNK_MS = 200
Emit = Callable[[pb.ConverseResponse], None]


class ReplyTurn:
    """Run with `start`; `finished` is set once ResponseDone was emitted."""

    def __init__(self, response_id: str, item_id: str, output_rate_hz: int, conversation: Conversation,
                 open_stream: Callable[[], ReplyStream], synthesizer: SpeechSynthesizer, models: AudioModels,
                 metrics: AudioMetrics, emit: Emit, speech_end_s: float | None,
                 playback_needed: Callable[[], bool], held: bool = False) -> None:
        self.response_id = response_id
        self.finished = asyncio.Event()
        self._item_id = item_id
        self._output_rate_hz = output_rate_hz
        self._conversation = conversation
        self._open_stream = open_stream
        self._stream: ReplyStream | None = None
        self._synthesizer = synthesizer
        self._models = models
        self._metrics = metrics
        self._emit = emit
        self._speech_end_s = speech_end_s
        self._playback_needed = playback_needed
        self._clock = PlaybackClock()
        self._pieces: list[SpokenPiece] = []
        self._text = ""
        self._usage: ReplyUsage | None = None
        self._played_report_ms: int | None = None
        self._played_all = asyncio.Event()
        self._all_sent = False
        self._task: asyncio.Task | None = None
        self._held: list[pb.ConverseResponse] | None = [] if held else None  # events waiting for release
        self._released = asyncio.Event()
        if not held:
            self._released.set()

    def start(self) -> None:
        self._send(pb.ConverseResponse(response_created=pb.ResponseCreated(
            response_id=self.response_id, item_id=self._item_id)))
        self._task = asyncio.create_task(self._run())

    def release(self, speech_end_s: float | None) -> None:
        """A held reply goes out: its waiting events now, in order, then the rest as they come."""
        self._speech_end_s = speech_end_s
        held, self._held = self._held or [], None
        for event in held:
            self._emit(event)
        self._released.set()

    def discard(self) -> None:
        """Drops a held reply (its turn went on): the engine request is cancelled, nothing is emitted."""
        if self._stream is not None:
            self._stream.cancel()
        if self._task is not None:
            self._task.cancel()
        self._held = []

    def _send(self, event: pb.ConverseResponse) -> None:
        if self._held is not None:
            self._held.append(event)
        else:
            self._emit(event)

    def report_played(self, played_ms: int) -> None:
        self._played_report_ms = max(0, played_ms)
        if self._all_sent and self._played_report_ms >= self._clock.sent_ms:
            self._played_all.set()

    def stop(self, status: int, interrupted_at_input_ms: int = 0) -> None:
        """Ends the reply now (barge-in or the client's cancel), keeping what was played."""
        if self.finished.is_set():
            return
        if self._stream is not None:
            self._stream.cancel()
        if self._task is not None:
            self._task.cancel()
        played = self._clock.played_ms() if self._played_report_ms is None else self._played_report_ms
        played = min(played, self._clock.sent_ms)
        self._finish(status, spoken_text(self._pieces, played), played, interrupted_at_input_ms)

    async def _run(self) -> None:
        pieces: asyncio.Queue[str | None] = asyncio.Queue()
        speaker = asyncio.create_task(self._speak(pieces))
        try:
            self._stream = self._open_stream()
            splitter = ClauseSplitter()
            async for delta in self._stream.deltas():
                if delta.text:
                    self._text += delta.text
                    self._send(pb.ConverseResponse(response_text_delta=pb.ResponseTextDelta(
                        response_id=self.response_id, delta=delta.text)))
                    for piece in splitter.push(delta.text):
                        pieces.put_nowait(piece)
                self._usage = delta.usage or self._usage
            if tail := splitter.flush():
                pieces.put_nowait(tail)
            pieces.put_nowait(None)
            await speaker
            self._all_sent = True
            await self._wait_for_playback()
        except ArbiError as error:
            await self._released.wait()  # the user's turn enters the history before this reply
            self._finish(audio_pb.RESPONSE_STATUS_FAILED, self._text, 0, 0, error)
            return
        finally:
            speaker.cancel()
        self._finish(audio_pb.RESPONSE_STATUS_COMPLETED, self._text, self._clock.sent_ms, 0)

    async def _speak(self, pieces: asyncio.Queue[str | None]) -> None:
        """Synthesizes the pieces one after the other; a second task sends each one's audio once the reply
        is released, so synthesis goes on while a held reply waits."""
        voiced: asyncio.Queue[tuple[str, np.ndarray] | None] = asyncio.Queue()
        sender = asyncio.create_task(self._send_audio(voiced))
        try:
            while (piece := await pieces.get()) is not None:
                started = time.monotonic()
                samples = await self._models.synthesize(lambda text=piece: self._synthesizer.synthesize(text))
                self._metrics.synthesis.observe(time.monotonic() - started)
                voiced.put_nowait((piece, resample(samples, self._synthesizer.sample_rate_hz, self._output_rate_hz)))
            voiced.put_nowait(None)
            await sender
        finally:
            sender.cancel()

    async def _send_audio(self, voiced: asyncio.Queue[tuple[str, np.ndarray] | None]) -> None:
        await self._released.wait()
        chunk_samples = self._output_rate_hz * AUDIO_CHUNK_MS // 1000
        while (item := await voiced.get()) is not None:
            piece, samples = item
            piece_start_ms = self._clock.sent_ms
            for offset in range(0, len(samples), chunk_samples):
                chunk = samples[offset:offset + chunk_samples]
                if self._clock.sent_ms == 0 and self._speech_end_s is not None:
                    self._metrics.voice_to_reply.observe(time.monotonic() - self._speech_end_s)
                self._emit(pb.ConverseResponse(response_audio=pb.ResponseAudio(
                    response_id=self.response_id, audio=float_to_pcm16(chunk),
                    text=piece if offset == 0 else "", start_ms=self._clock.sent_ms)))
                self._clock.sent(1000 * len(chunk) // self._output_rate_hz)
            self._pieces.append(SpokenPiece(piece, piece_start_ms, self._clock.sent_ms))

    async def _wait_for_playback(self) -> None:
        """Until the client has played all the audio (report or estimate), or no longer plays it."""
        if self._played_report_ms is not None and self._played_report_ms >= self._clock.sent_ms:
            return
        remaining_s = (self._clock.sent_ms - self._clock.played_ms()) / 1000
        if remaining_s > 0 and self._playback_needed():
            try:
                await asyncio.wait_for(self._played_all.wait(), remaining_s)
            except TimeoutError:
                pass

    def _finish(self, status: int, text: str, played_ms: int, interrupted_at_input_ms: int,
                error: ArbiError | None = None) -> None:
        if self.finished.is_set():
            return
        self._conversation.add("assistant", text)
        done = pb.ResponseDone(response_id=self.response_id, status=status, text=text,
                               audio_sent_ms=self._clock.sent_ms, audio_played_ms=played_ms,
                               interrupted_at_input_ms=interrupted_at_input_ms)
        if self._usage is not None:
            done.usage.prompt_token_count = self._usage.prompt_token_count
            done.usage.output_token_count = self._usage.output_token_count
            done.usage.cached_prompt_token_count = self._usage.cached_prompt_token_count
        if error is not None:
            done.error.CopyFrom(status_of(error))
        self._emit(pb.ConverseResponse(response_done=done))
        self.finished.set()
