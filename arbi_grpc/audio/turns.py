"""Turn-taking from per-frame speech probabilities: when the user starts speaking, pauses, and ends a turn.

`TurnDetector` is a pure state machine on the input timeline (frame positions, never the wall clock), so
the same audio always gives the same events. Speech starts after `ONSET_FRAMES` frames at or above the
threshold; it pauses at the first frame below the threshold minus a hysteresis; a pause of
`silence_duration_ms` ends the turn. A pause of `SPECULATE_AFTER_MS` is reported early so the answer can
start before the turn is certain to have ended. Speech shorter than `MIN_SPEECH_MS` ends without a turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from arbi_grpc.audio.vad import FRAME_MS

ONSET_FRAMES = 2
HYSTERESIS = 0.15
SPECULATE_AFTER_MS = 96  # 3 frames: no gap inside the benchmark's spoken questions is that long (docs/audio.md)
MIN_SPEECH_MS = 200


@dataclass(frozen=True)
class VadSettings:
    """Server VAD settings, validated by the servicer's conversion."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    interrupt_response: bool = True
    create_response: bool = True


@dataclass(frozen=True)
class SpeechStarted:
    onset_ms: int  # start of the first speech frame
    confirmed_ms: int  # end of the frame that confirmed the onset


@dataclass(frozen=True)
class SpeechPaused:
    """Silence has lasted SPECULATE_AFTER_MS: the turn may be over; speech ended at `speech_end_ms`."""

    speech_end_ms: int


@dataclass(frozen=True)
class SpeechResumed:
    """Speech came back after a SpeechPaused, within the same turn."""


@dataclass(frozen=True)
class SpeechEnded:
    """The silence ended the turn (`is_turn`) or ended speech too short to be one."""

    speech_end_ms: int
    is_turn: bool


TurnEvent = SpeechStarted | SpeechPaused | SpeechResumed | SpeechEnded


class TurnDetector:
    """Feed one probability per frame, in order; each call returns the events that frame caused."""

    def __init__(self, settings: VadSettings) -> None:
        self.settings = settings
        self._frame_count = 0
        self._onset_run = 0  # consecutive speech frames before the onset is confirmed
        self._in_speech = False
        self._speech_start_ms = 0
        self._speech_end_ms = 0  # end of the last speech frame
        self._silent_ms = 0
        self._paused = False

    @property
    def in_speech(self) -> bool:
        return self._in_speech

    def push(self, probability: float) -> list[TurnEvent]:
        frame_start_ms = self._frame_count * FRAME_MS
        self._frame_count += 1
        frame_end_ms = frame_start_ms + FRAME_MS
        if not self._in_speech:
            return self._while_quiet(probability, frame_start_ms, frame_end_ms)
        return self._while_speaking(probability, frame_end_ms)

    def _while_quiet(self, probability: float, frame_start_ms: int, frame_end_ms: int) -> list[TurnEvent]:
        if probability < self.settings.threshold:
            self._onset_run = 0
            return []
        self._onset_run += 1
        if self._onset_run < ONSET_FRAMES:
            return []
        self._in_speech, self._paused, self._silent_ms = True, False, 0
        self._speech_start_ms = frame_start_ms - (ONSET_FRAMES - 1) * FRAME_MS
        self._speech_end_ms = frame_end_ms
        return [SpeechStarted(self._speech_start_ms, frame_end_ms)]

    def _while_speaking(self, probability: float, frame_end_ms: int) -> list[TurnEvent]:
        if probability >= self.settings.threshold - HYSTERESIS:
            self._speech_end_ms, self._silent_ms = frame_end_ms, 0
            if self._paused:
                self._paused = False
                return [SpeechResumed()]
            return []
        self._silent_ms += FRAME_MS
        if self._silent_ms >= self.settings.silence_duration_ms:
            self._in_speech, self._onset_run = False, 0
            is_turn = self._speech_end_ms - self._speech_start_ms >= MIN_SPEECH_MS
            return [SpeechEnded(self._speech_end_ms, is_turn)]
        if not self._paused and self._silent_ms >= SPECULATE_AFTER_MS:
            self._paused = True
            return [SpeechPaused(self._speech_end_ms)]
        return []

    def reset(self) -> None:
        """Forget the speech in progress (the input buffer was committed or cleared by the client)."""
        self._in_speech, self._paused, self._onset_run, self._silent_ms = False, False, 0, 0
