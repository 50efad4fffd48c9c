"""Structured output of an OpenAI chat or completion body: `response_format` and the vLLM spellings
(`guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`, `structured_outputs: {json, regex, choice,
grammar, json_object}`) as one output constraint, set on the request's `SamplingParameters.output_constraint`;
and `logit_bias`. At most one constraint per request; the server checks what it can only check by compiling
(schema keywords, regex and grammar syntax) and the gateway names the parameter the constraint came from in
that error (`server_params`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from arbi_client.arbi.v1 import generation_types_pb2 as types_pb

from arbi_gateway.errors import invalid

TOKEN_ID_LIMIT = 2**31 - 1
CONSTRAINT_FIELD = "sampling.output_constraint"


@dataclass(frozen=True)
class OutputConstraint:
    """One constraint: `kind` is json_schema, json_object, regex, grammar or choice; `param` the request
    parameter it came from (for errors)."""

    kind: str
    param: str
    json_schema: dict[str, Any] | None = None
    text: str = ""
    choices: tuple[str, ...] = ()
    strict: bool = False


def _schema_of(value: Any, param: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise invalid(param, f"'{param}' is not valid JSON: {error}.") from None
    if not isinstance(value, dict):
        raise invalid(param, f"'{param}' must be a JSON schema object.")
    return value


def _vllm_constraint(kind: str, value: Any, param: str) -> OutputConstraint:
    if kind == "json":
        return OutputConstraint("json_schema", param, json_schema=_schema_of(value, param))
    if kind == "json_object":
        return OutputConstraint("json_object", param)
    if kind == "choice":
        if not value:
            raise invalid(param, f"'{param}' must hold at least one choice.")
        if any(not choice for choice in value):
            raise invalid(param, f"'{param}' holds an empty string; every choice needs at least one character.")
        return OutputConstraint("choice", param, choices=tuple(value))
    if not value:
        raise invalid(param, f"'{param}' must not be empty.")
    return OutputConstraint(kind, param, text=value)


def _response_format(value: dict[str, Any]) -> OutputConstraint | None:
    kind = value["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return OutputConstraint("json_object", "response_format")
    spec = value["json_schema"]
    if "schema" not in spec:
        return OutputConstraint("json_object", "response_format")
    return OutputConstraint("json_schema", "response_format.json_schema.schema", json_schema=spec["schema"],
                            strict=bool(spec.get("strict")))


def output_constraint(body: dict[str, Any]) -> OutputConstraint | None:
    """The body's one output constraint, or None; a 400 when several are set."""
    found: list[OutputConstraint] = []
    if body.get("response_format") is not None:
        constraint = _response_format(body["response_format"])
        if constraint is not None:
            found.append(constraint)
    for kind in ("json", "regex", "choice", "grammar"):
        if body.get(f"guided_{kind}") is not None:
            found.append(_vllm_constraint(kind, body[f"guided_{kind}"], f"guided_{kind}"))
    structured = {name: value for name, value in (body.get("structured_outputs") or {}).items()
                  if value is not None and value is not False}
    for kind, value in structured.items():
        found.append(_vllm_constraint(kind, value, f"structured_outputs.{kind}"))
    if len(found) > 1:
        names = ", ".join(f"'{constraint.param}'" for constraint in found)
        raise invalid(found[1].param, f"Set one output constraint, got {names}.")
    return found[0] if found else None


def set_constraint(constraint: OutputConstraint, sampling: types_pb.SamplingParameters) -> None:
    """Writes the constraint into the request's sampling parameters."""
    message = sampling.output_constraint
    if constraint.kind == "json_schema":
        message.json_schema.schema_json = json.dumps(constraint.json_schema)
        message.strict = constraint.strict
    elif constraint.kind == "json_object":
        message.json_object.SetInParent()
    elif constraint.kind == "regex":
        message.regex = constraint.text
    elif constraint.kind == "grammar":
        message.ebnf_grammar = constraint.text
    else:
        message.choice.choices.extend(constraint.choices)


def server_params(constraint: OutputConstraint | None) -> dict[str, str]:
    """The server's field of the constraint (and each field under it) under the parameter it came from."""
    return {} if constraint is None else {CONSTRAINT_FIELD: constraint.param}


def logit_bias(body: dict[str, Any]) -> dict[int, float]:
    """`logit_bias` with its token ids as integers; a 400 naming a key that is not a token id."""
    bias = {}
    for key, value in (body.get("logit_bias") or {}).items():
        if not key.isdigit() or int(key) > TOKEN_ID_LIMIT:
            raise invalid(f"logit_bias.{key}", f"Invalid key in 'logit_bias': {key!r} is not a token id.")
        bias[int(key)] = float(value)
    return bias
