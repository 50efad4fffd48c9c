"""The tools of one request and the caller's choice among them, checked before anything is queued.

A tool is a function: a name, a description and a JSON schema of its arguments (an object schema). The
choice is `none` (no tools in the prompt, plain text out), `auto` (the model decides; calls are parsed from
its output), `required` (at least one call, enforced by an output constraint) or one named tool.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from arbi_grpc.errors import InvalidArgumentError

TOOLS_FIELD = "chat.tools"
TOOL_CHOICE_FIELD = "chat.tool_choice"
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ToolChoiceMode(enum.Enum):
    NONE = "none"
    AUTO = "auto"
    REQUIRED = "required"
    NAMED = "named"


@dataclass(frozen=True)
class ToolDefinition:
    """One callable function; `parameters` is the JSON schema its arguments object must satisfy."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def openai_json(self) -> dict[str, Any]:
        """The `{"type": "function", "function": {...}}` form chat templates and prompts read."""
        function: dict[str, Any] = {"name": self.name, "parameters": dict(self.parameters)}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolChoice:
    mode: ToolChoiceMode = ToolChoiceMode.AUTO
    name: str = ""  # the tool of NAMED


@dataclass(frozen=True)
class ToolSet:
    """A request's checked tools, the choice among them and whether several calls may come in one turn."""

    tools: tuple[ToolDefinition, ...]
    choice: ToolChoice = ToolChoice()
    parallel_calls: bool = True

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for index, tool in enumerate(self.tools):
            where = f"{TOOLS_FIELD}[{index}]"
            if not _NAME.match(tool.name):
                raise InvalidArgumentError(f"{where}.name", f"tool name {tool.name!r} must be 1 to 64 letters, "
                                                            "digits, '_' or '-'")
            if tool.name in seen:
                raise InvalidArgumentError(f"{where}.name", f"tool {tool.name!r} is defined twice")
            seen.add(tool.name)
            _check_parameters_schema(tool.parameters, f"{where}.parameters")
        if self.choice.mode in (ToolChoiceMode.REQUIRED, ToolChoiceMode.NAMED) and not self.tools:
            raise InvalidArgumentError(TOOL_CHOICE_FIELD, f"tool choice {self.choice.mode.value!r} needs at least "
                                                          "one tool")
        if self.choice.mode is ToolChoiceMode.NAMED and self.choice.name not in seen:
            raise InvalidArgumentError(TOOL_CHOICE_FIELD, f"tool choice names {self.choice.name!r}, which is not "
                                                          f"one of the defined tools ({', '.join(sorted(seen))})")

    @property
    def calls_expected(self) -> bool:
        """Whether the output is read for tool calls (any choice but none, with tools defined)."""
        return bool(self.tools) and self.choice.mode is not ToolChoiceMode.NONE

    @property
    def constrained(self) -> bool:
        """Whether the output is forced to be tool-call JSON (required or a named tool)."""
        return self.choice.mode in (ToolChoiceMode.REQUIRED, ToolChoiceMode.NAMED)

    def by_name(self, name: str) -> ToolDefinition | None:
        return next((tool for tool in self.tools if tool.name == name), None)


def _check_parameters_schema(schema: Mapping[str, Any], where: str) -> None:
    if not isinstance(schema, Mapping):
        raise InvalidArgumentError(where, "must be a JSON schema object")
    if schema.get("type", "object") != "object":
        raise InvalidArgumentError(where, f"must describe an object (type 'object'), got type {schema['type']!r}")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as error:
        keyword = error.path[-1] if error.path else error.validator
        raise InvalidArgumentError(where, f"is not a valid JSON schema (keyword {keyword!r}): {error.message}") from None
