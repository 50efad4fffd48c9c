"""Text to IPA phonemes with the `espeak-ng` program, run as a separate process for each piece of text.

espeak-ng is GPL-3: its library is never loaded into the server; only its command-line program runs, in
a child process, and its output (IPA text) is read back. It prints one line per clause; the clauses are
joined with commas and the piece ends with its own sentence-final punctuation, which is what the Piper
voices were trained on. A piece cut inside a sentence (at a clause break or by the splitter's word limit)
ends with a comma, so it is spoken with the rising, unfinished tone of a clause and not as a sentence.
"""

from __future__ import annotations

import shutil
import subprocess

from arbi_grpc.errors import MissingDependencyError

ESPEAK_TIMEOUT_S = 10.0
_FINAL_PUNCTUATION = ".?!"
_INSIDE_SENTENCE = ","


def espeak_program() -> str:
    """The espeak-ng executable, or a MissingDependencyError saying how to install it."""
    program = shutil.which("espeak-ng")
    if program is None:
        raise MissingDependencyError(
            "speech synthesis needs the espeak-ng program (Debian/Ubuntu: apt-get install espeak-ng)"
        )
    return program


class EspeakPhonemizer:
    """IPA phonemes of English text for a Piper voice; `voice` is an espeak-ng voice name."""

    def __init__(self, voice: str) -> None:
        self._program = espeak_program()
        self._voice = voice

    def phonemes(self, text: str) -> str:
        completed = subprocess.run(
            [self._program, "-q", "--ipa", "-v", self._voice, "--stdin"],
            input=text, capture_output=True, text=True, timeout=ESPEAK_TIMEOUT_S, check=False,
        )
        if completed.returncode != 0:
            raise RuntimeError(f"espeak-ng failed ({completed.returncode}): {completed.stderr.strip()}")
        clauses = [line.strip() for line in completed.stdout.splitlines() if line.strip()]
        stripped = text.rstrip()
        final = stripped[-1] if stripped and stripped[-1] in _FINAL_PUNCTUATION else _INSIDE_SENTENCE
        return ", ".join(clauses) + final if clauses else ""
