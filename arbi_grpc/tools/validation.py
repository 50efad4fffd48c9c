"""The check a parsed call passes before a client sees it as a call: its name is a defined tool and its
arguments are a JSON object valid for that tool's parameters schema. A call that fails goes back to the
client as the text the model wrote (`tool_call_stream.py`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

import jsonschema

from arbi_grpc.tools.definitions import ToolSet
from arbi_grpc.tools.events import ParsedCall


@dataclass(frozen=True)
class ValidCall:
    """A call a client may run: its tool's name and its arguments as compact JSON text."""

    name: str
    arguments_json: str


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(schema_json))


def validate_call(call: ParsedCall, tool_set: ToolSet) -> ValidCall | None:
    tool = tool_set.by_name(call.name)
    if tool is None or not isinstance(call.arguments, dict):
        return None
    if not _validator(json.dumps(dict(tool.parameters), sort_keys=True)).is_valid(call.arguments):
        return None
    return ValidCall(call.name, json.dumps(call.arguments, ensure_ascii=False))
