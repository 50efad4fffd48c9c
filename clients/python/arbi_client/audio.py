"""Audio helpers of the Python client (standard library only): PCM16 WAV files in and out, and the
request stream of a Converse call that sends a recording in chunks, paced like a live microphone or as
fast as the server reads."""

from __future__ import annotations

import time
import wave
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from arbi_client.arbi.v1 import audio_service_pb2 as audio_pb
from arbi_client.arbi.v1 import audio_types_pb2 as audio_types

CONVERSE_INPUT_RATES_HZ = (16_000, 24_000)


@dataclass(frozen=True)
class Pcm16:
    """Mono signed 16-bit little-endian samples."""

    data: bytes
    sample_rate_hz: int

    @property
    def duration_ms(self) -> int:
        return 1000 * len(self.data) // (2 * self.sample_rate_hz)


def read_wav(path: Path) -> Pcm16:
    """A mono 16-bit PCM WAV file; anything else raises ValueError saying how to convert it."""
    with wave.open(str(path), "rb") as reader:
        if reader.getnchannels() != 1 or reader.getsampwidth() != 2:
            raise ValueError(f"{path}: need mono 16-bit PCM (convert with: sox IN -c 1 -b 16 OUT.wav)")
        return Pcm16(reader.readframes(reader.getnframes()), reader.getframerate())


def write_wav(path: Path, audio: Pcm16) -> None:
    with wave.open(str(path), "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(audio.sample_rate_hz)
        writer.writeframes(audio.data)


def pcm16_format(sample_rate_hz: int) -> audio_types.AudioFormat:
    return audio_types.AudioFormat(encoding=audio_types.AUDIO_ENCODING_PCM16, sample_rate_hz=sample_rate_hz)


def audio_requests(audio: Pcm16, *, chunk_ms: int = 100, realtime: bool = True
                   ) -> Iterator[audio_pb.ConverseRequest]:
    """`audio` as Converse audio messages of `chunk_ms`, sent at the pace of playback when `realtime`."""
    chunk_bytes = 2 * audio.sample_rate_hz * chunk_ms // 1000
    started = time.monotonic()
    for index, offset in enumerate(range(0, len(audio.data), chunk_bytes)):
        if realtime:
            time.sleep(max(0.0, started + index * chunk_ms / 1000 - time.monotonic()))
        yield audio_pb.ConverseRequest(audio=audio.data[offset:offset + chunk_bytes])


def converse_requests(config: audio_pb.ConverseConfig, requests: Iterable[audio_pb.ConverseRequest]
                      ) -> Iterator[audio_pb.ConverseRequest]:
    """The config message, then `requests`."""
    yield audio_pb.ConverseRequest(config=config)
    yield from requests
