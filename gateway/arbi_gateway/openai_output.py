"""Upstream messages -> the pieces of OpenAI responses: per-choice state, finish reasons, usage, and the
logprobs objects of both routes (chat's `content` list, completions' parallel lists).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb

_FINISH_REASONS = {
    types_pb.FINISH_REASON_EOS_TOKEN: "stop",
    types_pb.FINISH_REASON_STOP_TOKEN: "stop",
    types_pb.FINISH_REASON_STOP_STRING: "stop",
    types_pb.FINISH_REASON_MAX_OUTPUT_TOKENS: "length",
    types_pb.FINISH_REASON_CONTEXT_LIMIT: "length",
    types_pb.FINISH_REASON_CANCELLED: "cancelled",
    types_pb.FINISH_REASON_TOOL_CALLS: "tool_calls",
}


@dataclass
class ToolCallState:
    """One tool call of a choice: its id and name from its first delta, its arguments' pieces."""

    call_id: str
    name: str
    arguments: list[str] = field(default_factory=list)

    def openai_json(self) -> dict[str, Any]:
        return {"id": self.call_id, "type": "function",
                "function": {"name": self.name, "arguments": "".join(self.arguments)}}


@dataclass
class ChoiceState:
    """What one choice has produced so far."""

    text: list[str] = field(default_factory=list)
    tokens: list[types_pb.GeneratedToken] = field(default_factory=list)
    prompt_tokens: list[types_pb.PromptToken] = field(default_factory=list)
    finish_reason: str | None = None
    usage: types_pb.Usage | None = None
    started: bool = False  # a streamed chunk of this choice was sent
    text_offset: int = 0  # characters of logprob tokens so far (completions' text_offset)
    tool_calls: dict[int, ToolCallState] = field(default_factory=dict)  # by the call's index

    def add(self, response: pb.GenerateResponse, keep_output: bool = True) -> None:
        if keep_output:
            self.text.append(response.text)
            self.tokens.extend(response.tokens)
            for delta in response.tool_calls:
                call = self.tool_calls.setdefault(delta.index, ToolCallState(delta.id, delta.name))
                call.arguments.append(delta.arguments)
        self.prompt_tokens.extend(response.prompt_tokens)
        if response.finish_reason != types_pb.FINISH_REASON_UNSPECIFIED:
            # Discarded output (max_tokens 0 with echo) ends for length with no output tokens.
            self.finish_reason = _FINISH_REASONS[response.finish_reason] if keep_output else "length"
            self.usage = types_pb.Usage()
            self.usage.CopyFrom(response.usage)
            if not keep_output:
                self.usage.output_token_count = 0


def token_ids(tokens: Iterable[types_pb.GeneratedToken],
              prompt_tokens: Iterable[types_pb.PromptToken] = ()) -> set[int]:
    """Every token id whose text a logprobs object needs (alternatives included)."""
    ids = {token.token_id for token in prompt_tokens}
    for token in tokens:
        ids.add(token.token_id)
        ids.update(alternative.token_id for alternative in token.top_logprobs)
    return ids


def usage_json(states: Sequence[ChoiceState], choice_count: int) -> dict[str, Any]:
    """OpenAI usage over all choices: each prompt counted once, every choice's output added."""
    firsts = [state.usage for state in states[::choice_count] if state.usage is not None]
    prompt = sum(usage.prompt_token_count for usage in firsts)
    completion = sum(state.usage.output_token_count for state in states if state.usage is not None)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(usage.cached_prompt_token_count for usage in firsts)},
    }


def _entry(token_id: int, logprob: float, texts: dict[int, str]) -> dict[str, Any]:
    text = texts[token_id]
    return {"token": text, "logprob": logprob, "bytes": list(text.encode())}


def chat_logprobs(tokens: Sequence[types_pb.GeneratedToken], texts: dict[int, str]) -> dict[str, Any]:
    """Chat's logprobs object: one entry per output token with its most likely alternatives."""
    return {"content": [
        {**_entry(token.token_id, token.logprob, texts),
         "top_logprobs": [_entry(alt.token_id, alt.logprob, texts) for alt in token.top_logprobs]}
        for token in tokens
    ], "refusal": None}


def completion_logprobs(state: ChoiceState, prompt_tokens: Sequence[types_pb.PromptToken],
                        tokens: Sequence[types_pb.GeneratedToken], texts: dict[int, str]) -> dict[str, Any]:
    """Completions' logprobs lists for `prompt_tokens` (echo) then `tokens`; advances `state.text_offset`.

    The server scores each prompt token but returns no alternatives for prompt positions, so a prompt
    token's `top_logprobs` entry holds that token alone (null for the first token, which has no context).
    """
    result: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}

    def append(token_id: int, logprob: float | None, top: dict[str, float] | None) -> None:
        result["tokens"].append(texts[token_id])
        result["token_logprobs"].append(logprob)
        result["top_logprobs"].append(top)
        result["text_offset"].append(state.text_offset)
        state.text_offset += len(texts[token_id])

    for prompt_token in prompt_tokens:
        logprob = prompt_token.logprob if prompt_token.HasField("logprob") else None
        append(prompt_token.token_id, logprob, None if logprob is None else {texts[prompt_token.token_id]: logprob})
    for token in tokens:
        append(token.token_id, token.logprob, {texts[alt.token_id]: alt.logprob for alt in token.top_logprobs})
    return result
