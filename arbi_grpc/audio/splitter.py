"""Cuts streamed reply text into pieces to synthesize as soon as each is complete.

A piece ends at a sentence end (`.`, `!`, `?` followed by whitespace) or, once it holds at least
`min_clause_chars`, at a clause break (`,`, `;`, `:` followed by whitespace). The first piece is short, so
the first audio leaves early: it ends at its first clause break whatever its length, or after
`first_piece_words` words when no break has come. Later pieces without a break end after a word limit of
three quarters of the words already cut (at least `first_piece_words`): the audio queued ahead of a piece
is about the words before it, so the piece is generated and synthesized while they play, and a long
sentence without punctuation still comes out in pieces. A word-limited piece does not end on an article,
determiner, preposition or conjunction ("the", "their", "of", "and"), nor after an abbreviation or an
initial ("Dr.", "J."), which ends no sentence either. Whatever remains is flushed at the end of the reply.
"""

from __future__ import annotations

import math
import re

_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*\s")
_CLAUSE_END = re.compile(r"[,;:]\s")
_WORD_END = re.compile(r"\S\s")
_ABBREVIATIONS = ("mr.", "mrs.", "ms.", "dr.", "st.", "vs.", "e.g.", "i.e.", "etc.")
# Measured with benchmarks/voice_latency.py (docs/audio.md): three words are about 0.9 s of speech, and
# with the reply started at the pause (speculative replies) they paused playback no more than four did.
FIRST_PIECE_WORDS = 3
LIMIT_PER_WORD_CUT = 0.75  # a later piece's word limit per word already cut
_NO_CUT_AFTER = frozenset(("a", "an", "the", "this", "these", "those", "my", "your", "his", "its", "our",
                           "their", "of", "to", "in", "on", "at", "by", "for", "with", "from", "as", "and", "or",
                           "but", "that", "which", "very"))


def _last_word(text: str) -> str:
    return text.rsplit(None, 1)[-1].lower() if text.strip() else ""


def _is_abbreviation(text_before_end: str) -> bool:
    last_word = _last_word(text_before_end)
    return last_word in _ABBREVIATIONS or re.fullmatch(r"[a-z]\.", last_word) is not None


class ClauseSplitter:
    """Feed text deltas with `push`; take the remainder with `flush` at the end."""

    def __init__(self, min_clause_chars: int = 24, first_piece_words: int = FIRST_PIECE_WORDS) -> None:
        self._pending = ""
        self._min_clause_chars = min_clause_chars
        self._first_piece_words = first_piece_words
        self._max_words = first_piece_words
        self._words_cut = 0

    def push(self, delta: str) -> list[str]:
        self._pending += delta
        pieces = []
        while (cut := self._next_cut()) is not None:
            piece, self._pending = self._pending[:cut].strip(), self._pending[cut:]
            if piece:
                pieces.append(piece)
                self._words_cut += len(piece.split())
                self._max_words = max(self._first_piece_words, math.ceil(LIMIT_PER_WORD_CUT * self._words_cut))
        return pieces

    def flush(self) -> str:
        piece, self._pending = self._pending.strip(), ""
        return piece

    @staticmethod
    def _may_cut_after(text: str) -> bool:
        return not _is_abbreviation(text) and _last_word(text).strip("\"'") not in _NO_CUT_AFTER

    def _next_cut(self) -> int | None:
        """The end of the earliest complete piece in the pending text, if any."""
        text = self._pending.lstrip()
        offset = len(self._pending) - len(text)
        min_clause_chars = self._min_clause_chars if self._words_cut else 0
        sentence = next((match.end() for match in _SENTENCE_END.finditer(text)
                         if not _is_abbreviation(text[:match.start() + 1])), None)
        clause = next((match.end() for match in _CLAUSE_END.finditer(text)
                       if match.start() >= min_clause_chars), None)
        word_limit = next((match.end() for count, match in enumerate(_WORD_END.finditer(text), 1)
                           if count >= self._max_words and self._may_cut_after(text[:match.start() + 1])), None)
        cuts = [cut for cut in (sentence, clause, word_limit) if cut is not None]
        return offset + min(cuts) if cuts else None
