"""Turns a step's sampled tokens into streamed outputs: detokenization, stop conditions, finish reasons.

A constrained sequence's matcher accepts each token here (`SequenceGrammar.advance`), before the model runner fills
the mask of its next step: a terminated matcher ends the sequence as its EOS would (FinishReason.EOS_TOKEN), also
under ignore_eos, since the grammar allows nothing after its end; a token outside the grammar (a defect) ends it
with an error: INVALID_ARGUMENT when the mask had allowed no token (the model's vocabulary cannot continue the
constraint), else INTERNAL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arbi_grpc.engine.output_constraint import FIELD
from arbi_grpc.engine.request import FinishReason, RequestOutput, TokenOutput
from arbi_grpc.engine.sequence import Sequence
from arbi_grpc.errors import ArbiError, InvalidArgumentError

if TYPE_CHECKING:
    from arbi_grpc.engine.grammar.matcher import SequenceGrammar


class OutputProcessor:
    """Appends sampled tokens to sequences and decides when each one is finished."""

    def __init__(self, eos_token_ids: frozenset[int], max_model_len: int) -> None:
        self.eos_token_ids = eos_token_ids
        self.max_model_len = max_model_len

    def add_prompt_logprobs(self, sequence: Sequence, logprobs: list[float]) -> None:
        if sequence.prompt_logprobs is None:
            sequence.prompt_logprobs = [None]  # the first prompt token has no context
        sequence.prompt_logprobs.extend(logprobs)

    def append_token(self, sequence: Sequence, token: TokenOutput) -> RequestOutput:
        """Records one sampled token and returns the output to stream for it."""
        token_id = token.token_id
        sequence.token_ids.append(token_id)
        sequence.sampling_state.append_output(token_id)
        stopping = sequence.request.stopping
        finish: FinishReason | None = None
        text = ""
        if token_id in stopping.stop_token_ids:
            finish = FinishReason.STOP_TOKEN
        elif token_id in self.eos_token_ids and not stopping.ignore_eos:
            finish = FinishReason.EOS_TOKEN
        elif not stopping.stop_strings:
            text = sequence.detokenizer.push(token_id)  # no stop string: nothing is held back
        else:
            check = sequence.stop_matcher.push(sequence.detokenizer.push(token_id))
            text = check.emit
            if check.stopped:
                finish = FinishReason.STOP_STRING
        grammar = sequence.grammar
        if grammar is not None:
            grammar.advance(sequence.token_ids, sequence.num_prompt_tokens)
            if grammar.rejected_token is not None:
                return RequestOutput(request_id=sequence.request_id, error=_rejected(grammar))
            if finish is None and grammar.is_terminated:
                finish = FinishReason.EOS_TOKEN
        if finish is None and sequence.num_output_tokens >= stopping.max_output_tokens:
            finish = FinishReason.MAX_OUTPUT_TOKENS
        if finish is None and len(sequence.token_ids) >= self.max_model_len:
            finish = FinishReason.CONTEXT_LIMIT
        if finish is not None and finish is not FinishReason.STOP_STRING:
            # Release an unfinished character and text held back for a possible stop string.
            check = sequence.stop_matcher.push(sequence.detokenizer.flush())
            text += check.emit
            if check.stopped:
                finish = FinishReason.STOP_STRING
            else:
                text += sequence.stop_matcher.flush()
        return RequestOutput(
            request_id=sequence.request_id,
            tokens=(token,),
            text=text,
            prompt_logprobs=self._take_prompt_logprobs(sequence),
            finish_reason=finish,
            prompt_token_count=sequence.num_prompt_tokens,
            output_token_count=sequence.num_output_tokens,
            cached_prompt_token_count=sequence.num_cached_prompt_tokens,
        )

    @staticmethod
    def _take_prompt_logprobs(sequence: Sequence) -> tuple[float | None, ...] | None:
        if not sequence.wants_prompt_logprobs:
            return None
        sequence.prompt_logprobs_sent = True
        return tuple(sequence.prompt_logprobs or [None])


def _rejected(grammar: SequenceGrammar) -> ArbiError:
    if grammar.dead_end:
        return InvalidArgumentError(FIELD, f"the model's vocabulary cannot continue the output after "
                                           f"{grammar.num_accepted} tokens: no token spells what the constraint "
                                           "needs next")
    return ArbiError(f"the engine sampled token {grammar.rejected_token}, which the output constraint does not allow")
