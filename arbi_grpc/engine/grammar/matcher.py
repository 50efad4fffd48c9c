"""One sequence's grammar state: an xgrammar `GrammarMatcher` that has accepted a prefix of its output tokens.

`advance` accepts the outputs the matcher has not seen yet, including a token still in flight (sampled by the
step the host has not read: the model runner takes it from that step, so the next mask can be filled while the
device runs). Accepting is idempotent per token, so the model runner and the output processor may both call it.
Preemption by recompute keeps every sampled token (`Sequence`), so the matcher keeps its state: nothing to roll
back. A matcher terminates when it accepts a stop token (the model's EOS, which the mask allows only where the
grammar may end, and forces where it must); the output processor then ends the sequence.
"""

from __future__ import annotations

from collections.abc import Sequence

import xgrammar as xgr


class SequenceGrammar:
    """The matcher of one sequence (n > 1 gives each choice its own)."""

    def __init__(self, compiled: xgr.CompiledGrammar) -> None:
        self.matcher = xgr.GrammarMatcher(compiled)
        self.num_accepted = 0  # output tokens accepted, a prefix of the sequence's outputs
        self.rejected_token: int | None = None  # a sampled token outside the grammar: ends the sequence
        # The mask allowed no token: the vocabulary cannot spell what the grammar needs next (a RAW vocabulary
        # without single characters can be stuck on a literal's tail); the token sampled then is rejected.
        self.dead_end = False

    @property
    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    @property
    def can_fill(self) -> bool:
        """Whether the next token has a mask: a terminated or broken matcher's sequence ends at its last token."""
        return self.rejected_token is None and not self.matcher.is_terminated()

    def advance(self, token_ids: Sequence[int], num_prompt_tokens: int, in_flight: int | None = None) -> None:
        """Accepts the output tokens of `token_ids` (prompt first) and `in_flight` after those already accepted."""
        start = num_prompt_tokens + self.num_accepted
        pending = list(token_ids[start:])
        if in_flight is not None:
            pending.append(in_flight)
        for token_id in pending:
            if not self.can_fill:
                return
            if not self.matcher.accept_token(token_id):
                self.rejected_token = token_id
                return
            self.num_accepted += 1
