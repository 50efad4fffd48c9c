"""Cuts streamed reply text into pieces to synthesize as soon as each is complete.

A piece ends at a sentence end (`.`, `!`, `?` followed by whitespace) or, once it holds at least
`min_clause_chars`, at a clause break (`,`, `;`, `:` followed by whitespace), so the first audio leaves
after the first clause rather than the whole reply. A period after a single capital letter or a common
abbreviation ("Dr.", "e.g.") does not end a sentence. Whatever remains is flushed at the end of the reply.
"""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*\s")
_CLAUSE_END = re.compile(r"[,;:]\s")
_ABBREVIATIONS = ("mr.", "mrs.", "ms.", "dr.", "st.", "vs.", "e.g.", "i.e.", "etc.")


def _is_abbreviation(text_before_end: str) -> bool:
    last_word = text_before_end.rsplit(None, 1)[-1].lower() if text_before_end.strip() else ""
    return last_word in _ABBREVIATIONS or re.fullmatch(r"[a-z]\.", last_word) is not None


class ClauseSplitter:
    """Feed text deltas with `push`; take the remainder with `flush` at the end."""

    def __init__(self, min_clause_chars: int = 24) -> None:
        self._pending = ""
        self._min_clause_chars = min_clause_chars

    def push(self, delta: str) -> list[str]:
        self._pending += delta
        pieces = []
        while (cut := self._next_cut()) is not None:
            piece, self._pending = self._pending[:cut].strip(), self._pending[cut:]
            if piece:
                pieces.append(piece)
        return pieces

    def flush(self) -> str:
        piece, self._pending = self._pending.strip(), ""
        return piece

    def _next_cut(self) -> int | None:
        """The end of the earliest complete piece in the pending text, if any."""
        sentence = next((match.end() for match in _SENTENCE_END.finditer(self._pending)
                         if not _is_abbreviation(self._pending[:match.start() + 1])), None)
        clause = next((match.end() for match in _CLAUSE_END.finditer(self._pending)
                       if match.start() >= self._min_clause_chars), None)
        cuts = [cut for cut in (sentence, clause) if cut is not None]
        return min(cuts) if cuts else None
