"""A `required` or named tool choice becomes the tool-call JSON-schema output constraint, refused next to an
explicit one; its output is read by the constrained parser (bare call JSON, no tags)."""

from __future__ import annotations

import json

import pytest

from arbi_grpc.engine.output_constraint import ConstraintKind, OutputConstraint
from arbi_grpc.engine.sampling_params import SamplingParams
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.servicers.tool_conversion import tool_call_constraint
from arbi_grpc.tools.constraint_schema import tool_call_schema
from arbi_grpc.tools.definitions import ToolChoice, ToolChoiceMode, ToolDefinition, ToolSet
from arbi_grpc.tools.families import ToolCallFamily
from arbi_grpc.tools.tool_call_stream import ToolCallStream

WEATHER = ToolDefinition("get_weather", "", {"type": "object", "properties": {"city": {"type": "string"}},
                                             "required": ["city"]})
NAMED = ToolSet((WEATHER,), ToolChoice(ToolChoiceMode.NAMED, "get_weather"))


@pytest.mark.parametrize("tool_set", [NAMED, ToolSet((WEATHER,), ToolChoice(ToolChoiceMode.REQUIRED))])
def test_constrained_choice_gives_the_tool_call_schema(tool_set: ToolSet) -> None:
    constraint = tool_call_constraint(tool_set, SamplingParams())
    assert constraint.kind is ConstraintKind.JSON_SCHEMA
    assert json.loads(constraint.text) == tool_call_schema(tool_set)


def test_an_explicit_constraint_as_well_is_refused() -> None:
    sampling = SamplingParams(output_constraint=OutputConstraint(ConstraintKind.REGEX, r"\d+"))
    with pytest.raises(InvalidArgumentError) as raised:
        tool_call_constraint(NAMED, sampling)
    assert raised.value.field == "sampling.output_constraint"


def test_constrained_output_is_read_as_bare_call_json() -> None:
    stream = ToolCallStream(NAMED, ToolCallFamily.HERMES)
    steps = [stream.feed(piece) for piece in ('{"name": "get_weather", ', '"arguments": {"city": "Oslo"}}')]
    steps.append(stream.finish())
    (call,) = [call for step in steps for call in step.calls]
    assert (call.name, json.loads(call.arguments_json)) == ("get_weather", {"city": "Oslo"})
    assert "".join(step.text for step in steps) == ""
