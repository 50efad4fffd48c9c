"""PlaybackClock and spoken_text: what a client playing audio as it arrives has heard, and the text of it."""

from __future__ import annotations

from arbi_grpc.audio.playback import PlaybackClock, SpokenPiece, spoken_text


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_playback_follows_the_wall_clock_and_never_passes_what_was_sent() -> None:
    clock = FakeClock()
    playback = PlaybackClock(clock)
    playback.sent(200)
    playback.sent(200)  # queued behind the first chunk
    clock.now += 0.3
    assert playback.played_ms() == 300
    clock.now += 5
    assert playback.played_ms() == 400


def test_a_gap_in_sending_is_a_gap_in_playback() -> None:
    clock = FakeClock()
    playback = PlaybackClock(clock)
    playback.sent(100)
    clock.now += 1.0  # synthesis of the next piece took a second: the client played silence meanwhile
    playback.sent(100)
    clock.now += 0.05
    assert playback.played_ms() == 150


def test_spoken_text_keeps_whole_pieces_and_a_share_of_the_cut_one() -> None:
    pieces = [SpokenPiece("The capital of France is Paris.", 0, 2000),
              SpokenPiece("It has four million people living there.", 2000, 4000)]
    assert spoken_text(pieces, 0) == ""
    assert spoken_text(pieces, 2000) == "The capital of France is Paris."
    assert spoken_text(pieces, 3000) == "The capital of France is Paris. It has four"  # 3 of 7 words
    assert spoken_text(pieces, 9000) == "The capital of France is Paris. It has four million people living there."
