"""One sequence's grammar state: an xgrammar `GrammarMatcher` that has accepted a prefix of its output tokens.

`advance` accepts the outputs the matcher has not seen yet: the output processor calls it for each token the host
reads, and the model runner once more before it fills a mask (a no-op then). A mask is filled only once every earlier
token of its sequence has been read (`ModelRunner.fill_masks`), so no token in flight ever reaches a matcher.
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

    def advance(self, token_ids: Sequence[int], num_prompt_tokens: int) -> None:
        """Accepts the output tokens of `token_ids` (prompt first) after those already accepted."""
        for token_id in token_ids[num_prompt_tokens + self.num_accepted:]:
            if not self.can_fill:
                return
            if not self.matcher.accept_token(token_id):
                self.rejected_token = token_id
                return
            self.num_accepted += 1
