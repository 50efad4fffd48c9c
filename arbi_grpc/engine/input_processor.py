"""Turns a client's input (raw text, token ids or chat messages) into a validated GenerationRequest.

Runs on the caller's thread before anything is queued, so a bad request never reaches the engine: an output
constraint is parsed here too and its compile started (`ConstraintCompiler.compile`; the engine joins it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from arbi_grpc.engine.request import GenerationRequest, SchedulingParams
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.text.chat_template import ChatTemplate
from arbi_grpc.text.tokenizer import TextTokenizer

if TYPE_CHECKING:
    from arbi_grpc.engine.grammar.compiler import ConstraintCompiler


@dataclass(frozen=True)
class TextPrompt:
    """Raw text, tokenized without adding special tokens."""

    text: str


@dataclass(frozen=True)
class TokenPrompt:
    """Token ids, used as they are."""

    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class ChatPrompt:
    """Chat messages ({"role", "content"}), rendered with the model's chat template."""

    messages: tuple[Mapping[str, str], ...]


PromptInput = TextPrompt | TokenPrompt | ChatPrompt


class InputProcessor:
    """Tokenizes and checks prompts against the model's vocabulary and context limit."""

    def __init__(self, tokenizer: TextTokenizer, vocab_size: int, max_model_len: int,
                 grammars: ConstraintCompiler | None = None) -> None:
        self.tokenizer = tokenizer
        self.grammars = grammars
        self.chat_template = ChatTemplate(tokenizer)
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len

    def tokenize(self, prompt: PromptInput) -> list[int]:
        if isinstance(prompt, TextPrompt):
            field, token_ids = "prompt", self.tokenizer.encode(prompt.text, add_special_tokens=False)
        elif isinstance(prompt, TokenPrompt):
            field, token_ids = "token_ids", list(prompt.token_ids)
            self._check_vocabulary(field, token_ids)
        else:
            field, token_ids = "chat.messages", self.chat_template.encode(list(prompt.messages))
        if not token_ids:
            raise InvalidArgumentError(field, "the input is empty; send at least one token")
        limit = self.max_model_len - 1
        if len(token_ids) > limit:
            raise InvalidArgumentError(
                field,
                f"the input has {len(token_ids)} tokens; at most {limit} fit the context of "
                f"{self.max_model_len} tokens with one token of output",
            )
        return token_ids

    def build(self, request_id: str, prompt: PromptInput, sampling: SamplingParams,
              stopping: StoppingParams, scheduling: SchedulingParams = SchedulingParams()
              ) -> GenerationRequest:
        stopping.check_vocab(self.vocab_size)
        sampling.check_vocab(self.vocab_size)
        if sampling.output_constraint is not None and self.grammars is not None:
            self.grammars.compile(sampling.output_constraint)  # raises for a constraint that does not parse
        return GenerationRequest(
            request_id=request_id,
            prompt_token_ids=tuple(self.tokenize(prompt)),
            sampling=sampling,
            stopping=stopping,
            scheduling=scheduling,
        )

    def _check_vocabulary(self, field: str, token_ids: list[int]) -> None:
        for token_id in token_ids:
            if not 0 <= token_id < self.vocab_size:
                raise InvalidArgumentError(
                    field, f"token id {token_id} is outside the vocabulary [0, {self.vocab_size})"
                )
