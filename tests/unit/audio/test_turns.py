"""TurnDetector: onset after two speech frames, pause and end of turn after the configured silence, blips
that are too short to be a turn, and resumption within a turn; all on the input timeline."""

from __future__ import annotations

from arbi_grpc.audio.turns import (
    SPECULATE_AFTER_MS,
    SpeechEnded,
    SpeechPaused,
    SpeechResumed,
    SpeechStarted,
    TurnDetector,
    VadSettings,
)
from arbi_grpc.audio.vad import FRAME_MS


def run(probabilities: list[float], settings: VadSettings = VadSettings()) -> list[tuple[int, object]]:
    detector = TurnDetector(settings)
    return [(index, event) for index, p in enumerate(probabilities) for event in detector.push(p)]


def frames(ms: int) -> int:
    return ms // FRAME_MS


def test_speech_then_silence_is_one_turn() -> None:
    quiet, speech = [0.01] * 10, [0.9] * frames(800)
    events = run(quiet + speech + [0.01] * frames(600))
    (start_index, started), (_, paused), (end_index, ended) = events
    assert started == SpeechStarted(onset_ms=10 * FRAME_MS, confirmed_ms=12 * FRAME_MS)
    assert start_index == 11
    assert paused == SpeechPaused(speech_end_ms=(10 + len(speech)) * FRAME_MS)
    assert ended == SpeechEnded(speech_end_ms=(10 + len(speech)) * FRAME_MS, is_turn=True)
    assert (end_index - (10 + len(speech)) + 1) * FRAME_MS >= 500


def test_a_single_loud_frame_starts_nothing() -> None:
    assert run([0.01, 0.95, 0.01, 0.95, 0.01] * 20) == []


def test_speech_shorter_than_a_turn_ends_without_one() -> None:
    events = run([0.9] * 4 + [0.0] * frames(700))
    assert isinstance(events[0][1], SpeechStarted)
    assert events[-1][1] == SpeechEnded(speech_end_ms=4 * FRAME_MS, is_turn=False)


def test_a_short_pause_resumes_the_same_turn() -> None:
    pause = [0.0] * frames(SPECULATE_AFTER_MS + 64)
    events = [event for _, event in run([0.9] * 20 + pause + [0.9] * 20 + [0.0] * frames(600))]
    assert [type(event) for event in events] == [SpeechStarted, SpeechPaused, SpeechResumed, SpeechPaused,
                                                 SpeechEnded]
    assert events[-1].speech_end_ms == (40 + len(pause)) * FRAME_MS


def test_hysteresis_keeps_speech_through_a_dip() -> None:
    events = run([0.9] * 20 + [0.4] * 30 + [0.0] * frames(600), VadSettings(threshold=0.5))
    assert events[-1][1].speech_end_ms == 50 * FRAME_MS


def test_silence_duration_is_configurable() -> None:
    events = run([0.9] * 20 + [0.0] * 25, VadSettings(silence_duration_ms=1000))
    assert not any(isinstance(event, SpeechEnded) for _, event in events)
    events = run([0.9] * 20 + [0.0] * 40, VadSettings(silence_duration_ms=320))
    assert events[-1] == (29, SpeechEnded(speech_end_ms=20 * FRAME_MS, is_turn=True))
