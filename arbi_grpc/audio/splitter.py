"""Cuts streamed reply text into pieces to synthesize as soon as each is complete.

A piece ends at a sentence end (`.`, `!`, `?` followed by whitespace) or, once it holds at least
`min_clause_chars`, at a clause break (`,`, `;`, `:` followed by whitespace). The first piece is short, so
the first audio leaves early: it ends at its first clause break whatever its length, or after
`first_piece_words` words when no break has come. The word limit doubles with each piece (4, 8, 16, ...):
the short first piece plays while the longer next one is generated and synthesized, and a long sentence
without punctuation still comes out in pieces. A period after a single capital letter or a common
abbreviation ("Dr.", "e.g.") ends neither a sentence nor a piece cut by the word limit. Whatever remains
is flushed at the end of the reply.
"""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*\s")
_CLAUSE_END = re.compile(r"[,;:]\s")
_WORD_END = re.compile(r"\S\s")
_ABBREVIATIONS = ("mr.", "mrs.", "ms.", "dr.", "st.", "vs.", "e.g.", "i.e.", "etc.")
# Measured with benchmarks/voice_latency.py (docs/audio.md): four words are about 1.2 s of speech, which
# covers the generation and synthesis of the next piece on 2 CPU cores.
FIRST_PIECE_WORDS = 4


def _is_abbreviation(text_before_end: str) -> bool:
    last_word = text_before_end.rsplit(None, 1)[-1].lower() if text_before_end.strip() else ""
    return last_word in _ABBREVIATIONS or re.fullmatch(r"[a-z]\.", last_word) is not None


class ClauseSplitter:
    """Feed text deltas with `push`; take the remainder with `flush` at the end."""

    def __init__(self, min_clause_chars: int = 24, first_piece_words: int = FIRST_PIECE_WORDS) -> None:
        self._pending = ""
        self._min_clause_chars = min_clause_chars
        self._max_words = first_piece_words
        self._first = True

    def push(self, delta: str) -> list[str]:
        self._pending += delta
        pieces = []
        while (cut := self._next_cut()) is not None:
            piece, self._pending = self._pending[:cut].strip(), self._pending[cut:]
            if piece:
                pieces.append(piece)
                self._first = False
                self._max_words *= 2
        return pieces

    def flush(self) -> str:
        piece, self._pending = self._pending.strip(), ""
        return piece

    def _next_cut(self) -> int | None:
        """The end of the earliest complete piece in the pending text, if any."""
        text = self._pending.lstrip()
        offset = len(self._pending) - len(text)
        min_clause_chars = 0 if self._first else self._min_clause_chars
        sentence = next((match.end() for match in _SENTENCE_END.finditer(text)
                         if not _is_abbreviation(text[:match.start() + 1])), None)
        clause = next((match.end() for match in _CLAUSE_END.finditer(text)
                       if match.start() >= min_clause_chars), None)
        word_limit = next((match.end() for count, match in enumerate(_WORD_END.finditer(text), 1)
                           if count >= self._max_words and not _is_abbreviation(text[:match.start() + 1])),
                          None)
        cuts = [cut for cut in (sentence, clause, word_limit) if cut is not None]
        return offset + min(cuts) if cuts else None
