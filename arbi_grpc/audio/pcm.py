"""Audio samples at the edges of the pipeline: PCM16 bytes and WAV files to float32 arrays and back, and
resampling between the rates the stages need (16 kHz recognition, 22.05 kHz synthesis, the client's rate).

Inside the pipeline audio is a mono float32 numpy array in [-1, 1] with a known sample rate.
"""

from __future__ import annotations

import io
import wave
from dataclasses import dataclass

import numpy as np

from arbi_grpc.errors import InvalidArgumentError

PCM16_MAX = 32768.0


@dataclass(frozen=True)
class Audio:
    """Mono float32 samples at `sample_rate_hz`."""

    samples: np.ndarray
    sample_rate_hz: int

    @property
    def duration_ms(self) -> int:
        return int(round(1000 * len(self.samples) / self.sample_rate_hz))


def pcm16_to_float(data: bytes, field: str) -> np.ndarray:
    """Little-endian signed 16-bit samples as float32; an odd byte count is refused naming `field`."""
    if len(data) % 2:
        raise InvalidArgumentError(field, f"PCM16 audio needs an even byte count, got {len(data)} bytes")
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / PCM16_MAX


def float_to_pcm16(samples: np.ndarray) -> bytes:
    clipped = np.clip(samples, -1.0, 1.0 - 1.0 / PCM16_MAX)
    return (clipped * PCM16_MAX).astype("<i2").tobytes()


def resample(samples: np.ndarray, from_hz: int, to_hz: int) -> np.ndarray:
    """Band-limited enough for speech: a moving-average anti-alias filter when downsampling, then linear
    interpolation onto the new grid."""
    if from_hz == to_hz or len(samples) == 0:
        return samples.astype(np.float32, copy=False)
    if to_hz < from_hz:
        width = int(round(from_hz / to_hz))
        if width > 1:
            samples = np.convolve(samples, np.full(width, 1.0 / width, dtype=np.float32), mode="same")
    count = int(round(len(samples) * to_hz / from_hz))
    positions = np.arange(count, dtype=np.float64) * (from_hz / to_hz)
    return np.interp(positions, np.arange(len(samples)), samples).astype(np.float32)


def read_wav(data: bytes, field: str) -> Audio:
    """A RIFF/WAVE file of 16-bit PCM (mono, or stereo mixed down); anything else is refused naming `field`."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise InvalidArgumentError(field, "not a WAV file (no RIFF/WAVE header); send 16-bit PCM WAV")
    try:
        with wave.open(io.BytesIO(data)) as reader:
            channels, width, rate = reader.getnchannels(), reader.getsampwidth(), reader.getframerate()
            frames = reader.readframes(reader.getnframes())
    except (wave.Error, EOFError) as error:
        raise InvalidArgumentError(field, f"unreadable WAV file: {error}") from error
    if width != 2:
        raise InvalidArgumentError(field, f"WAV samples must be 16-bit PCM, got {8 * width}-bit")
    if channels not in (1, 2):
        raise InvalidArgumentError(field, f"WAV audio must be mono or stereo, got {channels} channels")
    samples = pcm16_to_float(frames[: len(frames) - len(frames) % (2 * channels)], field)
    if channels == 2:
        samples = samples.reshape(-1, 2).mean(axis=1)
    return Audio(samples, rate)


def write_wav(audio: Audio) -> bytes:
    """A mono 16-bit PCM WAV file of `audio`."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(audio.sample_rate_hz)
        writer.writeframes(float_to_pcm16(audio.samples))
    return buffer.getvalue()

