"""The JSON schemas of the OpenAI request bodies the gateway accepts: one source for request checking
(`json_schema.check`) and for the OpenAPI document.

Parameters of OpenAI's API that arbi-serve does not implement are listed by name: a request that sets one
(to anything but null) is refused with a 400 that names it, never silently ignored. The extensions
`top_k`, `min_p`, `repetition_penalty`, `min_tokens` and `ignore_eos` reach the server's sampling and
stopping options; structured output (both routes) and tools (chat) are in `openai_structured_schemas.py`.
"""

from __future__ import annotations

from arbi_gateway.config import GatewayConfig
from arbi_gateway.json_schema import Schema
from arbi_gateway.openai_structured_schemas import (
    TOOL_CALL,
    structured_chat_properties,
    structured_output_properties,
)

MAX_INT32 = 2**31 - 1
MAX_SEED = 2**63 - 1
MAX_TOP_LOGPROBS = 20
MAX_STOP_SEQUENCES = 16

UNSUPPORTED_CHAT_PARAMETERS = frozenset({
    "audio", "function_call", "functions", "metadata", "modalities", "prediction", "prompt_cache_key",
    "reasoning_effort", "safety_identifier", "service_tier", "store", "verbosity", "web_search_options",
})
UNSUPPORTED_COMPLETION_PARAMETERS = frozenset({"best_of", "suffix"})


def _nullable(kind: str, description: str, **constraints: object) -> Schema:
    return {"type": [kind, "null"], "description": description, **constraints}


def _common_properties(config: GatewayConfig, min_max_tokens: int) -> dict[str, Schema]:
    return {
        "model": {"type": "string", "description": "The served model name (GET /v1/models)."},
        "frequency_penalty": _nullable(
            "number", "Subtracted from a token's logit per earlier occurrence in the output.",
            minimum=-2, maximum=2),
        "presence_penalty": _nullable(
            "number", "Subtracted once from the logit of every token already in the output.",
            minimum=-2, maximum=2),
        "max_tokens": _nullable("integer", "The most tokens to generate per choice.",
                                minimum=min_max_tokens, maximum=MAX_INT32),
        "n": _nullable("integer", "Choices to generate for each prompt.",
                       minimum=1, maximum=config.max_choice_count),
        "seed": _nullable("integer", "Seed of the random draws; choice i uses seed + i.",
                          minimum=0, maximum=MAX_SEED),
        "stop": {"anyOf": [
            {"type": ["string", "null"], "minLength": 1},
            {"type": "array", "maxItems": MAX_STOP_SEQUENCES, "items": {"type": "string", "minLength": 1}},
        ], "description": "Text that ends generation; it is not returned."},
        "stream": _nullable("boolean", "Stream the output as server-sent events."),
        "stream_options": {
            "type": ["object", "null"], "additionalProperties": False,
            "properties": {"include_usage": _nullable("boolean", "Send the token usage in a last chunk.")},
            "description": "Options of a streamed response (only with stream: true).",
        },
        "temperature": _nullable("number", "Softmax temperature; 0 is greedy.", minimum=0, maximum=2),
        "top_p": _nullable("number", "Nucleus sampling mass.", exclusiveMinimum=0, maximum=1),
        "user": _nullable("string", "The end user; their requests share prefix-cache blocks only with "
                                    "each other (the server's tenant)."),
        "top_k": _nullable("integer", "Extension: keep the k most likely tokens; 0 disables.",
                           minimum=0, maximum=MAX_INT32),
        "min_p": _nullable("number", "Extension: drop tokens below min_p times the top probability.",
                           minimum=0, maximum=1),
        "repetition_penalty": _nullable("number", "Extension: HF repetition penalty; 1 disables.",
                                        exclusiveMinimum=0, maximum=100),
        "min_tokens": _nullable("integer", "Extension: tokens generated before EOS or stop tokens may end "
                                           "the output.", minimum=0, maximum=MAX_INT32),
        "ignore_eos": _nullable("boolean", "Extension: keep generating past the end-of-sequence token."),
    }


_TEXT_PART: Schema = {
    "type": "object", "additionalProperties": False, "required": ["type", "text"],
    "properties": {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}},
}
_MESSAGE: Schema = {
    "type": "object", "additionalProperties": False, "required": ["role"],
    "properties": {
        "role": {"type": "string", "enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": {"anyOf": [
            {"type": "string"},
            {"type": "array", "minItems": 1, "items": _TEXT_PART},
            {"type": "null"},
        ], "description": "Required but for an assistant message with tool_calls."},
        "name": {"type": ["string", "null"], "description": "Accepted and not used."},
        "tool_calls": {"type": ["array", "null"], "items": TOOL_CALL,
                       "description": "An assistant message's calls (earlier turns)."},
        "tool_call_id": {"type": ["string", "null"], "minLength": 1,
                         "description": "A tool message's call (required with role tool)."},
    },
}


def chat_request_schema(config: GatewayConfig) -> Schema:
    """POST /v1/chat/completions."""
    properties = _common_properties(config, min_max_tokens=1)
    properties.update({
        "messages": {"type": "array", "minItems": 1, "items": _MESSAGE,
                     "description": "The conversation, oldest message first."},
        "max_completion_tokens": _nullable("integer", "The most tokens to generate per choice "
                                                      "(same as max_tokens).", minimum=1, maximum=MAX_INT32),
        "logprobs": _nullable("boolean", "Return the log-probability of each output token."),
        "top_logprobs": _nullable("integer", "Most likely alternatives per output token (needs logprobs).",
                                  minimum=0, maximum=MAX_TOP_LOGPROBS),
        **structured_chat_properties(),
    })
    return {"type": "object", "additionalProperties": False, "required": ["model", "messages"],
            "properties": properties}


def completion_request_schema(config: GatewayConfig) -> Schema:
    """POST /v1/completions."""
    properties = _common_properties(config, min_max_tokens=0)
    token_ids: Schema = {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0,
                                                                    "maximum": MAX_INT32}}
    properties.update({
        "prompt": {"anyOf": [
            {"type": "string"},
            {"type": "array", "minItems": 1, "maxItems": config.max_prompt_count, "items": {"type": "string"}},
            token_ids,
            {"type": "array", "minItems": 1, "maxItems": config.max_prompt_count, "items": token_ids},
        ], "description": "A prompt (text or token ids) or a list of prompts."},
        "echo": _nullable("boolean", "Return the prompt before the output (with its logprobs when asked)."),
        "logprobs": _nullable("integer", "Return logprobs with this many most likely alternatives.",
                              minimum=0, maximum=MAX_TOP_LOGPROBS),
        **structured_output_properties(),
    })
    properties["max_tokens"]["description"] += " Default 16; 0 is allowed with echo."
    return {"type": "object", "additionalProperties": False, "required": ["model", "prompt"],
            "properties": properties}
