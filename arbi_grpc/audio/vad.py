"""Voice activity detection: the speech probability of each 32 ms frame of 16 kHz audio.

`VoiceActivityDetector` is the interface the turn detector reads; `SileroVad` runs the Silero VAD v6 ONNX
model (the file ships inside the faster-whisper wheel) on onnxruntime, one recurrent state per stream.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Protocol

import numpy as np

VAD_SAMPLE_RATE_HZ = 16_000
FRAME_SAMPLES = 512  # 32 ms at 16 kHz, the frame Silero expects
FRAME_MS = 1000 * FRAME_SAMPLES // VAD_SAMPLE_RATE_HZ
_CONTEXT_SAMPLES = 64  # Silero reads the tail of the previous frame with each frame


class VadStream(Protocol):
    """The recurrent state of one audio stream."""

    def speech_probability(self, frame: np.ndarray) -> float:
        """The probability (0 to 1) that a frame of FRAME_SAMPLES 16 kHz samples holds speech."""


class VoiceActivityDetector(Protocol):
    def new_stream(self) -> VadStream:
        """A fresh state for one audio stream."""


def silero_model_path() -> Path:
    """The Silero VAD ONNX file inside the installed faster-whisper wheel (found without importing it)."""
    spec = importlib.util.find_spec("faster_whisper")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("faster-whisper is not installed; it carries the Silero VAD model")
    return Path(spec.submodule_search_locations[0]) / "assets" / "silero_vad_v6.onnx"


class _SileroStream:
    def __init__(self, session) -> None:
        self._session = session
        self._hidden = np.zeros((1, 1, 128), dtype=np.float32)
        self._cell = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(_CONTEXT_SAMPLES, dtype=np.float32)

    def speech_probability(self, frame: np.ndarray) -> float:
        window = np.concatenate([self._context, frame.astype(np.float32, copy=False)])[None, :]
        probability, self._hidden, self._cell = self._session.run(
            None, {"input": window, "h": self._hidden, "c": self._cell}
        )
        self._context = window[0, -_CONTEXT_SAMPLES:]
        return float(np.ravel(probability)[0])


class SileroVad:
    """Silero VAD on onnxruntime, one thread: about 0.3 ms a frame, so it runs inline on the event loop."""

    def __init__(self, model_path: Path) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = onnxruntime.InferenceSession(
            str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def new_stream(self) -> VadStream:
        return _SileroStream(self._session)
