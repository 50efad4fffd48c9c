"""The engine's request and output types: what goes into the engine and what it streams back."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.errors import ArbiError


class FinishReason(enum.Enum):
    """Why a request stopped producing tokens."""

    EOS_TOKEN = "eos_token"
    STOP_TOKEN = "stop_token"
    STOP_STRING = "stop_string"
    MAX_OUTPUT_TOKENS = "max_output_tokens"
    CONTEXT_LIMIT = "context_limit"
    CANCELLED = "cancelled"


class Priority(enum.IntEnum):
    """Scheduling class: batch work yields to interactive work (lower value first)."""

    INTERACTIVE = 0
    BATCH = 1


@dataclass(frozen=True)
class SchedulingParams:
    """How a request is scheduled and cached.

    `tenant` names the prefix-cache namespace: requests of one tenant never reuse another's KV blocks.
    `use_prefix_cache` False neither reads nor writes the cache.
    """

    priority: Priority = Priority.INTERACTIVE
    tenant: str = ""
    use_prefix_cache: bool = True


@dataclass(frozen=True)
class GenerationRequest:
    """A validated, tokenized request ready for scheduling."""

    request_id: str
    prompt_token_ids: tuple[int, ...]
    sampling: SamplingParams
    stopping: StoppingParams
    scheduling: SchedulingParams = SchedulingParams()


@dataclass(frozen=True)
class TokenOutput:
    """One generated token with its log-probability and the top alternatives when asked."""

    token_id: int
    logprob: float
    top_logprobs: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class RequestOutput:
    """What one engine step produced for one request.

    `prompt_logprobs` is set on the first output only, when requested (None for the first token).
    `finish_reason` and the counts are final on the last output. `error` ends the stream abnormally.
    """

    request_id: str
    tokens: tuple[TokenOutput, ...] = ()
    text: str = ""
    prompt_logprobs: tuple[float | None, ...] | None = None
    finish_reason: FinishReason | None = None
    prompt_token_count: int = 0
    output_token_count: int = 0
    cached_prompt_token_count: int = 0
    error: ArbiError | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None or self.error is not None
