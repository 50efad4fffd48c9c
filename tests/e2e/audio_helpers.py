"""Speech for the audio tests: spoken questions made with the espeak-ng program, the recorded LibriVox
clips of tests/data/speech, and a client-side audio stream paced in real time like a microphone."""

from __future__ import annotations

import queue
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from google.rpc import error_details_pb2, status_pb2

from arbi_client.arbi.v1 import audio_service_pb2 as pb
from arbi_client.arbi.v1 import audio_types_pb2 as audio_pb
from arbi_grpc.audio.pcm import float_to_pcm16, read_wav, resample

SPEECH_DIR = Path(__file__).resolve().parents[1] / "data" / "speech"


def spoken(text: str, rate_hz: int = 16_000) -> bytes:
    """`text` spoken by espeak-ng (US English), as PCM16 at `rate_hz`."""
    with tempfile.NamedTemporaryFile(suffix=".wav") as wav:
        subprocess.run(["espeak-ng", "-v", "en-us", "-w", wav.name, text], check=True, capture_output=True)
        audio = read_wav(Path(wav.name).read_bytes(), "wav")
    return float_to_pcm16(resample(audio.samples, audio.sample_rate_hz, rate_hz))


def leading_silence_ms(pcm: bytes, rate_hz: int = 16_000) -> int:
    """Where the first 10 ms window louder than -40 dBFS starts."""
    window = rate_hz // 100
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768
    for index in range(0, len(samples) - window, window):
        if np.sqrt(np.mean(samples[index:index + window] ** 2)) > 0.01:
            return 10 * index // window
    return 1000 * len(samples) // rate_hz


def trailing_silence_ms(pcm: bytes, rate_hz: int = 16_000) -> int:
    return leading_silence_ms(np.frombuffer(pcm, dtype="<i2")[::-1].tobytes(), rate_hz)


def silence(ms: int, rate_hz: int = 16_000) -> bytes:
    return bytes(2 * rate_hz * ms // 1000)


def noise(ms: int, rate_hz: int = 16_000, level: float = 0.05, seed: int = 0) -> bytes:
    """Steady white noise (no speech in it)."""
    samples = np.random.default_rng(seed).normal(0.0, level, rate_hz * ms // 1000).astype(np.float32)
    return float_to_pcm16(samples)


def librivox_clips() -> list[tuple[Path, str]]:
    """(wav, reference transcript) of each recorded clip."""
    clips = []
    for line in (SPEECH_DIR / "transcription").read_text().splitlines():
        words, _, name = line.rpartition("(")
        clips.append((SPEECH_DIR / f"{name.strip(' )')}.wav", words.replace("<s>", "").replace("</s>", "").strip()))
    return clips


def config(rate_hz: int = 16_000, **fields) -> pb.ConverseConfig:
    return pb.ConverseConfig(input_format=audio_pb.AudioFormat(
        encoding=audio_pb.AUDIO_ENCODING_PCM16, sample_rate_hz=rate_hz), **fields)


class LiveAudio:
    """The request stream of a Converse call: the config, then audio chunks paced in real time (silence
    whenever nothing is queued) until `close`. `sent_ms` is the input timeline position sent so far."""

    def __init__(self, session_config: pb.ConverseConfig, chunk_ms: int = 40, realtime: bool = True) -> None:
        self._config = session_config
        self._rate = session_config.input_format.sample_rate_hz
        self._chunk_bytes = 2 * self._rate * chunk_ms // 1000
        self._realtime = realtime
        self._pending: queue.Queue[bytes | str | pb.ConverseRequest] = queue.Queue()
        self._closed = threading.Event()
        self.sent_ms = 0.0
        self.marks: dict[str, float] = {}  # where each marked `say` began on the input timeline
        self.started = 0.0  # monotonic time of the timeline's start (real-time pacing)

    def say(self, pcm: bytes, mark: str = "") -> None:
        if mark:
            self._pending.put(mark)
        for offset in range(0, len(pcm), self._chunk_bytes):
            self._pending.put(pcm[offset:offset + self._chunk_bytes])

    def send(self, request: pb.ConverseRequest) -> None:
        self._pending.put(request)

    def close(self) -> None:
        self._closed.set()

    def __iter__(self) -> Iterator[pb.ConverseRequest]:
        yield pb.ConverseRequest(config=self._config)
        self.started = started = time.monotonic()
        while True:
            try:
                item = self._pending.get_nowait()
            except queue.Empty:
                if self._closed.is_set():
                    return
                item = bytes(self._chunk_bytes)
            if isinstance(item, str):
                self.marks[item] = self.sent_ms
                continue
            if isinstance(item, pb.ConverseRequest):
                yield item
                continue
            if self._realtime:
                time.sleep(max(0.0, started + self.sent_ms / 1000 - time.monotonic()))
            self.sent_ms += 1000 * len(item) / (2 * self._rate)
            yield pb.ConverseRequest(audio=item)


@dataclass
class Reply:
    response_id: str
    text: str
    audio: bytes
    done: pb.ResponseDone


def replies_of(events: list[pb.ConverseResponse]) -> list[Reply]:
    """The replies of a session's events, in order."""
    replies: dict[str, Reply] = {}
    for event in events:
        kind = event.WhichOneof("event")
        if kind == "response_created":
            replies[event.response_created.response_id] = Reply(event.response_created.response_id, "", b"",
                                                                 pb.ResponseDone())
        elif kind == "response_text_delta":
            replies[event.response_text_delta.response_id].text += event.response_text_delta.delta
        elif kind == "response_audio":
            replies[event.response_audio.response_id].audio += event.response_audio.audio
        elif kind == "response_done":
            replies[event.response_done.response_id].done = event.response_done
    return list(replies.values())


def of_kind(events: list[pb.ConverseResponse], kind: str) -> list:
    return [getattr(event, kind) for event in events if event.WhichOneof("event") == kind]


def field_of(status: status_pb2.Status) -> str:
    """The first field a status's BadRequest names ("" without one)."""
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            return bad_request.field_violations[0].field
    return ""
