"""The gateway's output constraints and logit bias reach the GenerateRequest of both routes (chat and
completions), and the server's error on a constraint names the request parameter it came from."""

from __future__ import annotations

import json

import pytest
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from arbi_gateway.config import GatewayConfig
from arbi_gateway.errors import ApiError, api_error_of
from arbi_gateway.openai_requests import SERVER_FIELD_PARAMS, chat_plan, completion_plan
from arbi_gateway.openai_schemas import chat_request_schema, completion_request_schema
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
COMPLETION = {"model": "m", "prompt": ["one", "two"]}


def _constraint(**fields) -> types_pb.OutputConstraint:
    return types_pb.OutputConstraint(**fields)


CASES = [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA, "strict": True}}},
     _constraint(json_schema=types_pb.JsonSchemaConstraint(schema_json=json.dumps(SCHEMA)), strict=True),
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_object"}}, _constraint(json_object=types_pb.JsonObjectConstraint()),
     "response_format"),
    ({"guided_json": json.dumps(SCHEMA)},
     _constraint(json_schema=types_pb.JsonSchemaConstraint(schema_json=json.dumps(SCHEMA))), "guided_json"),
    ({"guided_regex": r"\d{4}"}, _constraint(regex=r"\d{4}"), "guided_regex"),
    ({"guided_choice": ["yes", "no"]}, _constraint(choice=types_pb.ChoiceConstraint(choices=["yes", "no"])),
     "guided_choice"),
    ({"guided_grammar": 'root ::= "a"'}, _constraint(ebnf_grammar='root ::= "a"'), "guided_grammar"),
    ({"structured_outputs": {"json_object": True}}, _constraint(json_object=types_pb.JsonObjectConstraint()),
     "structured_outputs.json_object"),
]


@pytest.mark.parametrize(("extra", "expected", "param"), CASES)
def test_chat_constraint_reaches_the_request(extra: dict, expected: types_pb.OutputConstraint, param: str) -> None:
    plan = chat_plan({**CHAT, **extra}, chat_request_schema(GatewayConfig()))
    (request,) = plan.requests()
    assert request.sampling.output_constraint == expected
    assert plan.server_params == {"sampling.output_constraint": param}


@pytest.mark.parametrize(("extra", "expected", "param"), CASES)
def test_completion_constraint_reaches_every_prompt(extra: dict, expected: types_pb.OutputConstraint,
                                                    param: str) -> None:
    plan = completion_plan({**COMPLETION, **extra, "n": 2}, completion_request_schema(GatewayConfig()))
    requests = plan.requests()
    assert len(requests) == 4 and all(r.sampling.output_constraint == expected for r in requests)
    assert plan.server_params == {"sampling.output_constraint": param}


def test_no_constraint_leaves_the_field_unset() -> None:
    plan = chat_plan({**CHAT, "response_format": {"type": "text"}}, chat_request_schema(GatewayConfig()))
    assert not plan.requests()[0].sampling.HasField("output_constraint") and plan.server_params == {}


def test_completion_logit_bias_reaches_every_prompt() -> None:
    plan = completion_plan({**COMPLETION, "logit_bias": {"17": -100, "3": 2.5}},
                           completion_request_schema(GatewayConfig()))
    assert all(dict(r.sampling.logit_bias) == {17: -100.0, 3: 2.5} for r in plan.requests())
    with pytest.raises(ApiError) as raised:
        completion_plan({**COMPLETION, "logit_bias": {"x": 1}}, completion_request_schema(GatewayConfig()))
    assert raised.value.param == "logit_bias.x"


def test_tools_stay_chat_only() -> None:
    with pytest.raises(ApiError) as raised:
        completion_plan({**COMPLETION, "tools": []}, completion_request_schema(GatewayConfig()))
    assert raised.value.code == "unknown_parameter"


def _status(field: str) -> status_pb2.Status:
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.BadRequest(field_violations=[
        error_details_pb2.BadRequest.FieldViolation(field=field, description="bad")]))
    return status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message="bad", details=[detail])


@pytest.mark.parametrize(("field", "param"), [
    ("sampling.output_constraint", "guided_regex"),
    ("sampling.output_constraint.regex", "guided_regex"),
    ("sampling.output_constraint.choice.choices[1]", "guided_regex"),
    ("chat.messages[2].content", "messages"),
    ("sampling.logit_bias", "logit_bias"),
    ("sampling.no_such_field", "sampling.no_such_field"),
])
def test_server_fields_name_the_request_parameter(field: str, param: str) -> None:
    params = {**SERVER_FIELD_PARAMS, "sampling.output_constraint": "guided_regex"}
    error = api_error_of(_status(field), params)
    assert (error.status, error.param) == (400, param)
