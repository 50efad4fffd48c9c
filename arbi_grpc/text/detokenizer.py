"""Streams generated token ids into text pieces that never split a UTF-8 character.

Each push decodes a small window of recent tokens twice (context alone, context + new tokens) and emits the
difference, so tokenizers whose decoding of a token depends on its neighbours (byte-level BPE bytes of one
character spread over several tokens, SentencePiece leading spaces) stream correctly at O(1) cost per token.
"""

from __future__ import annotations

from collections.abc import Sequence

from arbi_grpc.text.tokenizer import TextTokenizer

REPLACEMENT_CHARACTER = "\ufffd"
PROMPT_CONTEXT_TOKENS = 5
# A UTF-8 character is at most 4 bytes and every byte-level token holds at least one byte, so a character
# completes within 4 tokens; beyond this many pending tokens the bytes are invalid and are released as U+FFFD.
MAX_PENDING_TOKENS = 8


class IncrementalDetokenizer:
    """Turns one request's output tokens into text, piece by piece; special tokens produce no text.

    For byte-level tokenizers the concatenation of all `push` results plus `flush()` equals
    `tokenizer.decode(output_ids)` whenever that text is valid UTF-8. The first output tokens are decoded in
    the context of the prompt's last tokens, as a continuation of the prompt.
    """

    def __init__(self, tokenizer: TextTokenizer, prompt_token_ids: Sequence[int]) -> None:
        self._tokenizer = tokenizer
        context = list(prompt_token_ids[-PROMPT_CONTEXT_TOKENS:])
        # The context must start and end at character boundaries, so its text is a stable prefix of the
        # window's text; a prompt ending inside a character gets no context at all.
        while context and self._decode(context).startswith(REPLACEMENT_CHARACTER):
            context.pop(0)
        if self._decode(context).endswith(REPLACEMENT_CHARACTER):
            context.clear()
        # window = [context tokens already emitted | pending tokens not yet emitted]
        self._window: list[int] = context
        self._pending_start = len(context)

    def push(self, token_id: int) -> str:
        """Text completed by `token_id` (possibly empty while a multi-byte character is still incomplete)."""
        self._window.append(token_id)
        context_text = self._decode(self._window[: self._pending_start])
        window_text = self._decode(self._window)
        pending_count = len(self._window) - self._pending_start
        incomplete = window_text.endswith(REPLACEMENT_CHARACTER) or len(window_text) <= len(context_text)
        if incomplete and pending_count < MAX_PENDING_TOKENS:
            return ""
        return self._emit(window_text[len(context_text) :])

    def flush(self) -> str:
        """Text still held at the end of generation (an unfinished character comes out as U+FFFD)."""
        if self._pending_start == len(self._window):
            return ""
        context_text = self._decode(self._window[: self._pending_start])
        return self._emit(self._decode(self._window)[len(context_text) :])

    def _emit(self, text: str) -> str:
        """The pending tokens become the next push's context."""
        del self._window[: self._pending_start]
        self._pending_start = len(self._window)
        return text

    def _decode(self, token_ids: list[int]) -> str:
        return self._tokenizer.decode(token_ids, skip_special_tokens=True)
