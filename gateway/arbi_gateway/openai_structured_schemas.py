"""The JSON schemas of the parameters for structured output (chat and completions) and tools (chat): `response_format`,
`tools`, `tool_choice`, `parallel_tool_calls`, `logit_bias`, the vLLM spellings (`guided_json`,
`guided_regex`, `guided_choice`, `guided_grammar`, `structured_outputs`), and the chat messages that carry
tool calls and tool results. Rules between them are checked in `openai_structured.py` and `openai_tools.py`.
"""

from __future__ import annotations

from arbi_gateway.json_schema import Schema

MAX_TOOLS = 128
MAX_LOGIT_BIAS = 300
_NAME: Schema = {"type": "string", "minLength": 1}
_FREE_OBJECT: Schema = {"type": "object"}

_JSON_SCHEMA_FORMAT: Schema = {
    "type": "object", "additionalProperties": False, "required": ["name"],
    "properties": {
        "name": {**_NAME, "description": "The schema's name."},
        "description": {"type": "string"},
        "schema": {**_FREE_OBJECT, "description": "The JSON schema the output must satisfy."},
        "strict": {"type": ["boolean", "null"], "description": "Refuse schema keywords that cannot be enforced "
                                                               "instead of ignoring them."},
    },
}
RESPONSE_FORMAT: Schema = {"anyOf": [
    {"type": "object", "additionalProperties": False, "required": ["type"],
     "properties": {"type": {"type": "string", "enum": ["text", "json_object"]}}},
    {"type": "object", "additionalProperties": False, "required": ["type", "json_schema"],
     "properties": {"type": {"type": "string", "enum": ["json_schema"]}, "json_schema": _JSON_SCHEMA_FORMAT}},
    {"type": "null"},
], "description": "The output's format: text, any JSON object, or JSON valid for a schema."}

TOOL: Schema = {
    "type": "object", "additionalProperties": False, "required": ["type", "function"],
    "properties": {
        "type": {"type": "string", "enum": ["function"]},
        "function": {
            "type": "object", "additionalProperties": False, "required": ["name"],
            "properties": {
                "name": {**_NAME, "description": "Letters, digits, '_' or '-', at most 64."},
                "description": {"type": "string"},
                "parameters": {**_FREE_OBJECT, "description": "JSON schema of the arguments object."},
                "strict": {"type": ["boolean", "null"]},
            },
        },
    },
}
TOOL_CHOICE: Schema = {"anyOf": [
    {"type": ["string", "null"], "enum": ["none", "auto", "required", None]},
    {"type": "object", "additionalProperties": False, "required": ["type", "function"],
     "properties": {"type": {"type": "string", "enum": ["function"]},
                    "function": {"type": "object", "additionalProperties": False, "required": ["name"],
                                 "properties": {"name": _NAME}}}},
], "description": "none, auto (default with tools), required, or one named function."}

TOOL_CALL: Schema = {
    "type": "object", "additionalProperties": False, "required": ["id", "type", "function"],
    "properties": {
        "id": _NAME,
        "type": {"type": "string", "enum": ["function"]},
        "function": {"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
                     "properties": {"name": _NAME, "arguments": {"type": "string",
                                                                 "description": "The arguments as JSON text."}}},
    },
}

_STRUCTURED_OUTPUTS: Schema = {
    "type": ["object", "null"], "additionalProperties": False,
    "properties": {
        "json": {"anyOf": [_FREE_OBJECT, {"type": "string"}]},
        "regex": {"type": "string"},
        "choice": {"type": "array", "items": {"type": "string"}},
        "grammar": {"type": "string"},
        "json_object": {"type": ["boolean", "null"]},
    },
    "description": "Extension (vLLM): exactly one of json, regex, choice, grammar, json_object.",
}


def structured_chat_properties() -> dict[str, Schema]:
    """The chat request's properties for structured output and tools."""
    return {
        "tools": {"type": ["array", "null"], "maxItems": MAX_TOOLS, "items": TOOL,
                  "description": "Functions the model may call."},
        "tool_choice": TOOL_CHOICE,
        "parallel_tool_calls": {"type": ["boolean", "null"],
                                "description": "Allow several tool calls in one answer (default true)."},
        **structured_output_properties(),
    }


def structured_output_properties() -> dict[str, Schema]:
    """The properties for structured output and logit bias, of chat and completion requests alike."""
    return {
        "response_format": RESPONSE_FORMAT,
        "logit_bias": {"type": ["object", "null"], "additionalProperties": {"type": "number", "minimum": -100,
                                                                            "maximum": 100},
                       "description": "Token id (as a string) -> bias added to its logit, in [-100, 100]."},
        "guided_json": {"anyOf": [_FREE_OBJECT, {"type": "string"}, {"type": "null"}],
                        "description": "Extension (vLLM): a JSON schema the output must satisfy."},
        "guided_regex": {"type": ["string", "null"], "description": "Extension (vLLM): a regular expression "
                                                                    "the whole output matches."},
        "guided_choice": {"type": ["array", "null"], "items": {"type": "string"},
                          "description": "Extension (vLLM): the output is one of these strings."},
        "guided_grammar": {"type": ["string", "null"], "description": "Extension (vLLM): an EBNF grammar "
                                                                      "(GBNF) the output follows."},
        "structured_outputs": _STRUCTURED_OUTPUTS,
    }
