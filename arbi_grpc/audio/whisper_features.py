"""Whisper's input features: the 80-band log-mel spectrogram of 16 kHz audio (25 ms Hann windows every
10 ms, Slaney mel scale, log10 clipped 8 decades below the peak and scaled to about [-1, 1]).

Written with numpy alone, so the recognizer needs no audio decoding library in the process.
"""

from __future__ import annotations

import functools

import numpy as np

SAMPLE_RATE_HZ = 16_000
N_FFT = 400
HOP_SAMPLES = 160
N_MELS = 80
FRAMES_PER_SECOND = SAMPLE_RATE_HZ // HOP_SAMPLES


def _hz_to_slaney_mel(hz: np.ndarray) -> np.ndarray:
    """Linear below 1 kHz (3 mels per 200 Hz), logarithmic above (27 mels per factor 6.4)."""
    linear = hz * 3.0 / 200.0
    log_region = 15.0 + 27.0 * np.log(np.maximum(hz, 1e-10) / 1000.0) / np.log(6.4)
    return np.where(hz < 1000.0, linear, log_region)


def _slaney_mel_to_hz(mel: np.ndarray) -> np.ndarray:
    linear = mel * 200.0 / 3.0
    log_region = 1000.0 * np.exp((mel - 15.0) * np.log(6.4) / 27.0)
    return np.where(mel < 15.0, linear, log_region)


@functools.cache
def mel_filters() -> np.ndarray:
    """[N_MELS, N_FFT // 2 + 1] triangular filters, area-normalized (Slaney)."""
    bin_hz = np.fft.rfftfreq(N_FFT, 1.0 / SAMPLE_RATE_HZ)
    edges_hz = _slaney_mel_to_hz(np.linspace(0.0, _hz_to_slaney_mel(np.array(SAMPLE_RATE_HZ / 2)), N_MELS + 2))
    lower, center, upper = edges_hz[:-2, None], edges_hz[1:-1, None], edges_hz[2:, None]
    rising = (bin_hz[None, :] - lower) / (center - lower)
    falling = (upper - bin_hz[None, :]) / (upper - center)
    triangles = np.maximum(0.0, np.minimum(rising, falling))
    return (triangles * (2.0 / (upper - lower))).astype(np.float32)


@functools.cache
def _hann_window() -> np.ndarray:
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)).astype(np.float32)  # periodic


def log_mel_spectrogram(samples: np.ndarray, frame_count: int) -> np.ndarray:
    """[N_MELS, frame_count] features of `samples` (16 kHz), zero-padded or cut to `frame_count` frames."""
    padded = np.zeros(frame_count * HOP_SAMPLES, dtype=np.float32)
    used = samples[: len(padded)]
    padded[: len(used)] = used
    centered = np.pad(padded, N_FFT // 2, mode="reflect")
    # windows: [frame_count, N_FFT]
    windows = np.lib.stride_tricks.sliding_window_view(centered, N_FFT)[::HOP_SAMPLES][:frame_count]
    power = np.abs(np.fft.rfft(windows * _hann_window(), axis=1)) ** 2
    mel = mel_filters() @ power.T.astype(np.float32)
    log_mel = np.log10(np.maximum(mel, 1e-10))
    log_mel = np.maximum(log_mel, log_mel.max() - 8.0)
    return ((log_mel + 4.0) / 4.0).astype(np.float32)
