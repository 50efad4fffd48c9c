"""A request's runtime state inside the engine: its tokens, progress, KV blocks and output pipeline."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from arbi_grpc.engine.request import GenerationRequest, Priority, RequestOutput
from arbi_grpc.engine.sampler import SamplingState
from arbi_grpc.text.detokenizer import IncrementalDetokenizer
from arbi_grpc.text.stop_strings import StopStringMatcher

if TYPE_CHECKING:
    from arbi_grpc.engine.grammar.matcher import SequenceGrammar

OutputSink = Callable[[RequestOutput], None]


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """Prompt plus output tokens, how many of them sit in the KV cache, and where.

    After a preemption `num_computed_tokens` drops to 0 and the whole sequence (prompt and output so
    far) is recomputed as if it were a prompt; sampling resumes exactly where it stopped.

    With overlapped steps a token can be sampled on the device but not yet read by the host: it counts in
    `num_tokens` (the scheduler plans with it, the model runner takes it from the device) but is not in
    `token_ids` until the engine reads the step that sampled it.
    """

    request: GenerationRequest
    sink: OutputSink
    sampling_state: SamplingState
    detokenizer: IncrementalDetokenizer
    stop_matcher: StopStringMatcher
    token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    block_table: list[int] = field(default_factory=list)
    # Held while the sequence runs and may be scheduled again (scheduler.py says when it is released).
    batch_slot: int | None = None
    status: SequenceStatus = SequenceStatus.WAITING
    # Prompt log-probabilities collected over prefill chunks, delivered with the first output.
    prompt_logprobs: list[float | None] | None = None
    prompt_logprobs_sent: bool = False
    # Prefix cache: chained hashes of the leading full blocks of `block_table` already indexed.
    block_hashes: list[int] = field(default_factory=list)
    # Prompt tokens served from the prefix cache at first admission (reported in usage).
    num_cached_prompt_tokens: int = 0
    admitted: bool = False
    # Sampled by launched steps whose results the host has not read yet (0, 1, or 2 for an instant).
    num_in_flight_tokens: int = 0
    # The output constraint's matcher, set once its grammar compiled (the sequence is scheduled only then).
    grammar: SequenceGrammar | None = None
    num_prompt_tokens: int = field(init=False)  # read several times per token: counted once

    def __post_init__(self) -> None:
        self.num_prompt_tokens = len(self.request.prompt_token_ids)
        if not self.token_ids:
            self.token_ids = list(self.request.prompt_token_ids)

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_tokens(self) -> int:
        """Tokens known to the engine: those on the host plus those sampled and still on the device."""
        return len(self.token_ids) + self.num_in_flight_tokens

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def reached_max_output_tokens(self) -> bool:
        """True once a token in flight is the last output the request asked for: it needs no further step.
        (A sequence that will end at the context limit or on a stop condition is scheduled once more, and that
        row is discarded.)"""
        return self.num_tokens - self.num_prompt_tokens >= self.request.stopping.max_output_tokens

    @property
    def needs_host_history(self) -> bool:
        """True while sampling its next token needs every earlier token on the host: sampling penalties read
        the output history, the min_output_tokens ban counts it, and prompt log-probabilities are assembled
        over chunks on the host. Such a sequence's step is read before the next one is scheduled."""
        request = self.request
        return (request.sampling.has_penalties or self.wants_prompt_logprobs
                or request.stopping.min_output_tokens > self.num_output_tokens)

    @property
    def priority(self) -> Priority:
        return self.request.scheduling.priority

    @property
    def cache_namespace(self) -> str | None:
        """The prefix-cache namespace, or None when this request stays out of the cache: it opted out, or it
        wants prompt log-probabilities, which need the logits of every prompt position (a cached prefix has none).
        """
        scheduling = self.request.scheduling
        if not scheduling.use_prefix_cache or self.request.sampling.prompt_logprobs:
            return None
        return scheduling.tenant

    @property
    def wants_prompt_logprobs(self) -> bool:
        return self.request.sampling.prompt_logprobs and not self.prompt_logprobs_sent
