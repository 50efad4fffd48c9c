"""What the user has heard of a reply: the real-time estimate of its playback, and the reply text cut to it.

A client plays reply audio as it arrives: a chunk starts when it arrives or when the previous chunk ends,
whichever is later. `PlaybackClock` replays that model on the server's clock, so an interruption without a
client report still knows how much was played. `spoken_text` keeps the pieces whose audio was played in
full and the words of the cut piece in proportion to the part played.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class SpokenPiece:
    """A synthesized piece of the reply and where its audio lies in the reply's audio, in ms."""

    text: str
    start_ms: int
    end_ms: int


class PlaybackClock:
    """Tracks sent reply audio against the wall clock (`now` in seconds, monotonic)."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._intervals: list[tuple[float, float]] = []  # estimated playback (start_s, end_s) per chunk
        self.sent_ms = 0

    def sent(self, duration_ms: int) -> None:
        """Records a chunk of `duration_ms` sent now."""
        now = self._now()
        start = max(now, self._intervals[-1][1]) if self._intervals else now
        self._intervals.append((start, start + duration_ms / 1000))
        self.sent_ms += duration_ms

    def played_ms(self) -> int:
        """The estimated audio played so far, at most what was sent."""
        now = self._now()
        played_s = sum(max(0.0, min(end, now) - start) for start, end in self._intervals)
        return min(self.sent_ms, int(round(played_s * 1000)))


def spoken_text(pieces: list[SpokenPiece], played_ms: int) -> str:
    """The reply text heard after `played_ms` of its audio."""
    words: list[str] = []
    for piece in pieces:
        if piece.end_ms <= played_ms:
            words += piece.text.split()
            continue
        if piece.start_ms < played_ms:
            piece_words = piece.text.split()
            fraction = (played_ms - piece.start_ms) / max(1, piece.end_ms - piece.start_ms)
            words += piece_words[: int(len(piece_words) * fraction)]
        break
    return " ".join(words)
