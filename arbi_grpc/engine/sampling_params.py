"""Per-request sampling and stopping settings, validated when built so the engine can trust them.

Every rejection is an InvalidArgumentError naming the API field (`sampling.<name>` / `stopping.<name>`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from arbi_grpc.engine.output_constraint import OutputConstraint
from arbi_grpc.errors import InvalidArgumentError

MAX_LOGPROBS_COUNT = 20
MAX_STOP_STRINGS = 16
MAX_SEED = 2**64 - 1
PENALTY_LIMIT = 2.0
LOGIT_BIAS_LIMIT = 100.0
MAX_LOGIT_BIAS_ENTRIES = 300
# Dividing logits by a temperature this small overflows float32; such requests are sampled greedily.
GREEDY_TEMPERATURE_BELOW = 1e-5


def _check_number(field_name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentError(field_name, f"must be a number, got {value!r}")
    if not math.isfinite(value):
        raise InvalidArgumentError(field_name, f"must be finite, got {value}")
    return float(value)


def _check_integer(field_name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(field_name, f"must be an integer, got {value!r}")
    return value


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen. temperature 0 (or below 1e-5) means greedy: argmax, deterministic.

    top_k 0 and top_p 1 and min_p 0 disable those filters; penalties at their defaults are off.
    logprobs_count asks for that many top alternatives per output token (the chosen token's logprob is
    always reported); prompt_logprobs asks for the logprob of every prompt token given its prefix.
    logit_bias maps token ids to a bias added to their logits after penalties; output_constraint, when
    set, masks every step's logits to the tokens its grammar allows.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    logprobs_count: int = 0
    prompt_logprobs: bool = False
    logit_bias: tuple[tuple[int, float], ...] = field(default_factory=tuple)
    output_constraint: OutputConstraint | None = None

    def __post_init__(self) -> None:
        temperature = _check_number("sampling.temperature", self.temperature)
        if temperature < 0:
            raise InvalidArgumentError("sampling.temperature", f"must be >= 0, got {self.temperature}")
        top_p = _check_number("sampling.top_p", self.top_p)
        if not 0 < top_p <= 1:
            raise InvalidArgumentError("sampling.top_p", f"must be in (0, 1], got {self.top_p}")
        if _check_integer("sampling.top_k", self.top_k) < 0:
            raise InvalidArgumentError("sampling.top_k", f"must be 0 (off) or >= 1, got {self.top_k}")
        min_p = _check_number("sampling.min_p", self.min_p)
        if not 0 <= min_p <= 1:
            raise InvalidArgumentError("sampling.min_p", f"must be in [0, 1], got {self.min_p}")
        if _check_number("sampling.repetition_penalty", self.repetition_penalty) <= 0:
            raise InvalidArgumentError(
                "sampling.repetition_penalty", f"must be > 0, got {self.repetition_penalty}"
            )
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if abs(_check_number(f"sampling.{name}", value)) > PENALTY_LIMIT:
                raise InvalidArgumentError(
                    f"sampling.{name}", f"must be in [-{PENALTY_LIMIT}, {PENALTY_LIMIT}], got {value}"
                )
        if self.seed is not None and not 0 <= _check_integer("sampling.seed", self.seed) <= MAX_SEED:
            raise InvalidArgumentError("sampling.seed", f"must be in [0, 2**64 - 1], got {self.seed}")
        logprobs_count = _check_integer("sampling.logprobs_count", self.logprobs_count)
        if not 0 <= logprobs_count <= MAX_LOGPROBS_COUNT:
            raise InvalidArgumentError(
                "sampling.logprobs_count", f"must be in [0, {MAX_LOGPROBS_COUNT}], got {self.logprobs_count}"
            )
        if not isinstance(self.prompt_logprobs, bool):
            raise InvalidArgumentError("sampling.prompt_logprobs", f"must be a bool, got {self.prompt_logprobs!r}")
        self._check_logit_bias()
        if self.output_constraint is not None and not isinstance(self.output_constraint, OutputConstraint):
            raise InvalidArgumentError("sampling.output_constraint", f"must be an OutputConstraint, got "
                                       f"{self.output_constraint!r}")

    def _check_logit_bias(self) -> None:
        # Frozen: normalise a dict or pairs to sorted (token_id, bias) tuples so the params stay hashable.
        entries = self.logit_bias.items() if isinstance(self.logit_bias, dict) else self.logit_bias
        pairs = tuple(sorted((_check_integer("sampling.logit_bias", token_id),
                              _check_number("sampling.logit_bias", bias)) for token_id, bias in entries))
        if len(pairs) > MAX_LOGIT_BIAS_ENTRIES:
            raise InvalidArgumentError(
                "sampling.logit_bias", f"at most {MAX_LOGIT_BIAS_ENTRIES} entries allowed, got {len(pairs)}"
            )
        for token_id, bias in pairs:
            if token_id < 0:
                raise InvalidArgumentError("sampling.logit_bias", f"token id must be >= 0, got {token_id}")
            if abs(bias) > LOGIT_BIAS_LIMIT:
                raise InvalidArgumentError(
                    "sampling.logit_bias",
                    f"bias of token {token_id} must be in [-{LOGIT_BIAS_LIMIT}, {LOGIT_BIAS_LIMIT}], got {bias}",
                )
        object.__setattr__(self, "logit_bias", pairs)

    def check_vocab(self, vocab_size: int) -> None:
        """Refuse logit_bias token ids the model cannot produce (call once the vocabulary is known)."""
        for token_id, _ in self.logit_bias:
            if token_id >= vocab_size:
                raise InvalidArgumentError(
                    "sampling.logit_bias", f"token id {token_id} is outside the vocabulary (size {vocab_size})"
                )

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE_BELOW

    @property
    def has_penalties(self) -> bool:
        return self.repetition_penalty != 1 or self.presence_penalty != 0 or self.frequency_penalty != 0


@dataclass(frozen=True)
class StoppingParams:
    """When generation ends. EOS always stops unless ignore_eos; stop strings are never emitted.

    Until min_output_tokens tokens are out, EOS (unless ignore_eos) and stop_token_ids cannot be sampled.
    """

    max_output_tokens: int
    min_output_tokens: int = 0
    stop_strings: tuple[str, ...] = field(default_factory=tuple)
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if _check_integer("stopping.max_output_tokens", self.max_output_tokens) < 1:
            raise InvalidArgumentError(
                "stopping.max_output_tokens", f"must be >= 1, got {self.max_output_tokens}"
            )
        min_output_tokens = _check_integer("stopping.min_output_tokens", self.min_output_tokens)
        if not 0 <= min_output_tokens <= self.max_output_tokens:
            raise InvalidArgumentError(
                "stopping.min_output_tokens",
                f"must be in [0, max_output_tokens={self.max_output_tokens}], got {self.min_output_tokens}",
            )
        # Frozen: normalise list inputs to tuples so the params stay hashable and immutable.
        for name in ("stop_strings", "stop_token_ids"):
            value = getattr(self, name)
            if not isinstance(value, (list, tuple)):
                raise InvalidArgumentError(f"stopping.{name}", f"must be a list, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        if len(self.stop_strings) > MAX_STOP_STRINGS:
            raise InvalidArgumentError(
                "stopping.stop_strings", f"at most {MAX_STOP_STRINGS} allowed, got {len(self.stop_strings)}"
            )
        if any(not isinstance(stop, str) or not stop for stop in self.stop_strings):
            raise InvalidArgumentError("stopping.stop_strings", "each stop string must be a non-empty string")
        for token_id in self.stop_token_ids:
            if _check_integer("stopping.stop_token_ids", token_id) < 0:
                raise InvalidArgumentError("stopping.stop_token_ids", f"must be >= 0, got {token_id}")
        if not isinstance(self.ignore_eos, bool):
            raise InvalidArgumentError("stopping.ignore_eos", f"must be a bool, got {self.ignore_eos!r}")

    def check_vocab(self, vocab_size: int) -> None:
        """Refuse stop_token_ids the model cannot produce (call once the model's vocabulary is known)."""
        for token_id in self.stop_token_ids:
            if token_id >= vocab_size:
                raise InvalidArgumentError(
                    "stopping.stop_token_ids", f"{token_id} is outside the vocabulary (size {vocab_size})"
                )
