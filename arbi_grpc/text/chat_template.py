"""Renders chat messages into a prompt with the model's own jinja2 chat template, the way HF does.

The template runs in jinja2's immutable sandbox with HF's helpers (`raise_exception`, `strftime_now`,
`tojson`). The rendered text already holds the model's special tokens (BOS, `<|im_start|>` ...), so it is
encoded with `add_special_tokens=False`: adding BOS again would double it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NoReturn

import jinja2
import jinja2.meta
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from arbi_grpc.errors import InvalidArgumentError, ModelLoadError
from arbi_grpc.text.tokenizer import TextTokenizer

MESSAGES_FIELD = "messages"
CHAT_ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class ChatMessage:
    """One message of a conversation; `role` is one of CHAT_ROLES. An assistant message may hold the tool
    calls it made (`{"id", "type": "function", "function": {"name", "arguments": dict}}`, HF's form) and a
    tool message the id of the call it answers."""

    role: str
    content: str
    tool_calls: tuple[Mapping[str, object], ...] = ()
    tool_call_id: str = ""

    def __post_init__(self) -> None:
        if self.role not in CHAT_ROLES:
            raise InvalidArgumentError(
                MESSAGES_FIELD, f"unknown role {self.role!r}; expected one of {', '.join(CHAT_ROLES)}"
            )

    @classmethod
    def from_mapping(cls, message: Mapping[str, object]) -> ChatMessage:
        """Build from a {"role": ..., "content": ...} dict, as requests carry them."""
        if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
            raise InvalidArgumentError(MESSAGES_FIELD, f"each message needs 'role' and 'content', got {message!r}")
        role, content = message["role"], message["content"]
        if not isinstance(role, str) or not isinstance(content, str):
            raise InvalidArgumentError(MESSAGES_FIELD, f"role and content must be strings, got {message!r}")
        return cls(role=role, content=content, tool_calls=tuple(message.get("tool_calls") or ()),
                   tool_call_id=str(message.get("tool_call_id") or ""))

    def template_json(self) -> dict[str, object]:
        """The message as chat templates read it (tool fields only when set)."""
        message: dict[str, object] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [dict(call) for call in self.tool_calls]
        if self.tool_call_id:
            message["tool_call_id"] = self.tool_call_id
        return message


def _raise_template_exception(message: str) -> NoReturn:
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(date_format: str) -> str:
    return datetime.now().strftime(date_format)


def _tojson(
    value: object,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """HF's `tojson`: unlike jinja2's built-in, no HTML escaping and non-ASCII kept as is."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _template_environment() -> ImmutableSandboxedEnvironment:
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_template_exception
    environment.globals["strftime_now"] = _strftime_now
    return environment


class ChatTemplate:
    """A model's compiled chat template, bound to its tokenizer."""

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self._tokenizer = tokenizer
        self._template: jinja2.Template | None = None
        self.supports_tools = False
        if tokenizer.chat_template is not None:
            environment = _template_environment()
            try:
                self._template = environment.from_string(tokenizer.chat_template)
                syntax = environment.parse(tokenizer.chat_template)
            except jinja2.exceptions.TemplateSyntaxError as error:
                raise ModelLoadError(f"chat template does not compile: {error}") from error
            # A template that reads `tools` renders tool definitions itself.
            self.supports_tools = "tools" in jinja2.meta.find_undeclared_variables(syntax)

    @property
    def source(self) -> str | None:
        return self._tokenizer.chat_template

    @property
    def available(self) -> bool:
        return self._template is not None

    def render(self, messages: Sequence[Mapping[str, object]], add_generation_prompt: bool = True,
               tools: Sequence[Mapping[str, object]] | None = None) -> str:
        """The prompt text for `messages`, ending with the assistant turn opener when asked; `tools` (OpenAI's
        function form) are passed to templates that render them (`supports_tools`)."""
        if self._template is None:
            raise InvalidArgumentError(
                MESSAGES_FIELD, "this model has no chat template; send a raw prompt instead of messages"
            )
        if not messages:
            raise InvalidArgumentError(MESSAGES_FIELD, "must hold at least one message")
        checked = [ChatMessage.from_mapping(message) for message in messages]
        try:
            extra = {"tools": [dict(tool) for tool in tools]} if tools else {}
            return self._template.render(
                messages=[message.template_json() for message in checked],
                add_generation_prompt=add_generation_prompt, **extra,
                bos_token=self._tokenizer.bos_token or "",
                eos_token=self._tokenizer.eos_token or "",
            )
        except (jinja2.exceptions.TemplateError, TypeError, ValueError, LookupError) as error:
            # Only the template's own evaluation runs here: its raise_exception, undefined names, bad ops.
            raise InvalidArgumentError(MESSAGES_FIELD, f"chat template rejected the messages: {error}") from error

    def encode(self, messages: Sequence[Mapping[str, object]], add_generation_prompt: bool = True) -> list[int]:
        """Prompt token ids for `messages` (rendered text encoded without adding special tokens)."""
        return self._tokenizer.encode(self.render(messages, add_generation_prompt), add_special_tokens=False)
