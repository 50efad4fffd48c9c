"""PCM16 and WAV conversion, resampling, and the refusals that name the field."""

from __future__ import annotations

import numpy as np
import pytest

from arbi_grpc.audio.input_buffer import InputBuffer
from arbi_grpc.audio.pcm import Audio, float_to_pcm16, pcm16_to_float, read_wav, resample, write_wav
from arbi_grpc.audio.vad import FRAME_SAMPLES
from arbi_grpc.errors import InvalidArgumentError


def tone(hz: float, rate: int, seconds: float = 0.5) -> np.ndarray:
    return (0.5 * np.sin(2 * np.pi * hz * np.arange(int(rate * seconds)) / rate)).astype(np.float32)


def test_pcm16_round_trip() -> None:
    samples = tone(440, 16_000)
    back = pcm16_to_float(float_to_pcm16(samples), "audio")
    assert np.max(np.abs(back - samples)) < 1e-4


def test_odd_byte_counts_and_non_wav_files_are_refused_by_field() -> None:
    with pytest.raises(InvalidArgumentError) as odd:
        pcm16_to_float(b"\x00\x01\x02", "audio")
    assert odd.value.field == "audio"
    with pytest.raises(InvalidArgumentError, match="not a WAV file"):
        read_wav(b"OggS" + bytes(40), "file")


def test_wav_round_trip_and_stereo_mixdown() -> None:
    audio = read_wav(write_wav(Audio(tone(300, 22_050), 22_050)), "file")
    assert audio.sample_rate_hz == 22_050 and audio.duration_ms == 500
    stereo = np.stack([tone(300, 8_000), tone(300, 8_000)], axis=1).ravel()
    data = write_wav(Audio(stereo, 8_000))
    header = bytearray(data[:44])
    header[22:24] = (2).to_bytes(2, "little")  # declare two channels
    header[28:32] = (8_000 * 4).to_bytes(4, "little")
    header[32:34] = (4).to_bytes(2, "little")
    mixed = read_wav(bytes(header) + data[44:], "file")
    assert len(mixed.samples) == len(stereo) // 2


def test_resampling_keeps_a_tone_and_the_duration() -> None:
    for source, target in ((24_000, 16_000), (22_050, 16_000), (16_000, 24_000)):
        out = resample(tone(440, source), source, target)
        assert len(out) == target // 2
        spectrum = np.abs(np.fft.rfft(out))
        assert abs(np.argmax(spectrum) * target / len(out) - 440) < 5


def test_input_buffer_cuts_frames_across_chunks_and_trims_when_idle() -> None:
    buffer = InputBuffer()
    assert buffer.append(np.zeros(300, np.float32)) == []
    frames = buffer.append(np.ones(FRAME_SAMPLES * 2, np.float32))
    assert [len(frame) for frame in frames] == [FRAME_SAMPLES, FRAME_SAMPLES]
    assert frames[0][:300].sum() == 0 and frames[0][300:].sum() == FRAME_SAMPLES - 300
    buffer.trim_to(10)
    assert len(buffer.held()) == 160 and buffer.end == 300 + 2 * FRAME_SAMPLES
    assert len(buffer.between(0, buffer.end)) == 160
