"""The session's input audio at 16 kHz on the input timeline, and the VAD frames cut from it.

Positions are absolute sample indices since the session began. While nobody speaks only the last
`keep_ms` are kept (the prefix padding a turn will start with), so an idle session holds little audio.
"""

from __future__ import annotations

import numpy as np

from arbi_grpc.audio.vad import FRAME_SAMPLES, VAD_SAMPLE_RATE_HZ

SAMPLES_PER_MS = VAD_SAMPLE_RATE_HZ // 1000


def ms_to_samples(ms: int) -> int:
    return ms * SAMPLES_PER_MS


def samples_to_ms(samples: int) -> int:
    return samples // SAMPLES_PER_MS


class InputBuffer:
    def __init__(self) -> None:
        self._samples = np.zeros(0, dtype=np.float32)
        self._start = 0  # absolute index of self._samples[0]
        self._next_frame = 0  # absolute index of the next VAD frame's first sample

    @property
    def end(self) -> int:
        """Absolute index one past the last sample received."""
        return self._start + len(self._samples)

    @property
    def held_count(self) -> int:
        """Samples held."""
        return len(self._samples)

    def append(self, samples: np.ndarray) -> list[np.ndarray]:
        """Adds samples; returns the complete VAD frames they finished, in order."""
        self._samples = np.concatenate([self._samples, samples])
        frames = []
        while self._next_frame + FRAME_SAMPLES <= self.end:
            offset = self._next_frame - self._start
            frames.append(self._samples[offset:offset + FRAME_SAMPLES])
            self._next_frame += FRAME_SAMPLES
        return frames

    def between(self, start: int, end: int) -> np.ndarray:
        """The samples of [start, end) that are still held."""
        lo, hi = max(start, self._start) - self._start, max(0, min(end, self.end) - self._start)
        return self._samples[lo:hi].copy()

    def held(self) -> np.ndarray:
        return self._samples.copy()

    def drop_before(self, position: int) -> None:
        """Forgets the samples before absolute index `position`."""
        cut = min(max(0, position - self._start), len(self._samples))
        self._samples = self._samples[cut:]
        self._start += cut

    def trim_to(self, keep_ms: int) -> None:
        """Keeps only the last `keep_ms` (while nobody speaks)."""
        self.drop_before(self.end - ms_to_samples(keep_ms))
