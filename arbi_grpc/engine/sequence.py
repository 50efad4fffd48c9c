"""A request's runtime state inside the engine: its tokens, progress, KV blocks and output pipeline."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from arbi_grpc.engine.request import GenerationRequest, Priority, RequestOutput
from arbi_grpc.engine.sampler import SamplingState
from arbi_grpc.text.detokenizer import IncrementalDetokenizer
from arbi_grpc.text.stop_strings import StopStringMatcher

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
    """

    request: GenerationRequest
    sink: OutputSink
    sampling_state: SamplingState
    detokenizer: IncrementalDetokenizer
    stop_matcher: StopStringMatcher
    token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    block_table: list[int] = field(default_factory=list)
    status: SequenceStatus = SequenceStatus.WAITING
    # Prompt log-probabilities collected over prefill chunks, delivered with the first output.
    prompt_logprobs: list[float | None] | None = None
    prompt_logprobs_sent: bool = False
    # Prefix cache: chained hashes of the leading full blocks of `block_table` already indexed.
    block_hashes: list[int] = field(default_factory=list)
    # Prompt tokens served from the prefix cache at first admission (reported in usage).
    num_cached_prompt_tokens: int = 0
    admitted: bool = False

    def __post_init__(self) -> None:
        if not self.token_ids:
            self.token_ids = list(self.request.prompt_token_ids)

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.request.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

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
