"""The tool-call parsers of each family on fixed model outputs, fed whole and split at every character
boundary: the same calls and the same text come out, whatever the split."""

from __future__ import annotations

import pytest

from arbi_grpc.tools.constrained_parser import ConstrainedToolCallParser
from arbi_grpc.tools.events import ParsedCall, TextPiece
from arbi_grpc.tools.families import ToolCallFamily, family_of_template, parser_for
from arbi_grpc.tools.hermes_parser import HermesToolCallParser
from arbi_grpc.tools.llama3_parser import Llama3JsonToolCallParser


def _merged(events: list) -> list:
    """Adjacent text pieces joined (the split changes where text pieces break, not what they hold)."""
    merged: list = []
    for event in events:
        if isinstance(event, TextPiece) and merged and isinstance(merged[-1], TextPiece):
            merged[-1] = TextPiece(merged[-1].text + event.text)
        elif not (isinstance(event, TextPiece) and not event.text):
            merged.append(event)
    return merged


def _parse(parser_type, pieces: list[str]) -> list:
    parser = parser_type()
    events = [event for piece in pieces for event in parser.feed(piece)]
    return _merged(events + parser.finish())


def _assert_every_split_agrees(parser_type, output: str, expected: list) -> None:
    assert _parse(parser_type, [output]) == expected
    for cut in range(1, len(output)):
        assert _parse(parser_type, [output[:cut], output[cut:]]) == expected, cut
    assert _parse(parser_type, list(output)) == expected


WEATHER = '{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "c"}}'
TIME = '{"name": "get_time", "arguments": {"zone": "UTC"}}'

HERMES_CASES = [
    (f"<tool_call>\n{WEATHER}\n</tool_call>",
     [ParsedCall("get_weather", {"city": "Zürich", "unit": "c"}, f"<tool_call>\n{WEATHER}\n</tool_call>")]),
    (f"Let me check. <tool_call>{WEATHER}</tool_call>\n<tool_call>{TIME}</tool_call> Done <",
     [TextPiece("Let me check. "),
      ParsedCall("get_weather", {"city": "Zürich", "unit": "c"}, f"<tool_call>{WEATHER}</tool_call>"),
      TextPiece("\n"), ParsedCall("get_time", {"zone": "UTC"}, f"<tool_call>{TIME}</tool_call>"),
      TextPiece(" Done <")]),
    # The closing tag never came, but the JSON is complete: still a call.
    (f"<tool_call>{TIME}", [ParsedCall("get_time", {"zone": "UTC"}, f"<tool_call>{TIME}")]),
    # Not a call object, or cut short: text.
    ('<tool_call>{"city": 1}</tool_call>', [TextPiece('<tool_call>{"city": 1}</tool_call>')]),
    ('a <tool_call>{"name": "f", "argu', [TextPiece('a <tool_call>{"name": "f", "argu')]),
    ("no calls, a <b> tag and <tool_cal", [TextPiece("no calls, a <b> tag and <tool_cal")]),
    # Arguments as a JSON string are decoded.
    ('<tool_call>{"name": "f", "arguments": "{\\"x\\": 2}"}</tool_call>',
     [ParsedCall("f", {"x": 2}, '<tool_call>{"name": "f", "arguments": "{\\"x\\": 2}"}</tool_call>')]),
]


@pytest.mark.parametrize(("output", "expected"), HERMES_CASES)
def test_hermes_parser_at_every_split(output: str, expected: list) -> None:
    _assert_every_split_agrees(HermesToolCallParser, output, expected)


LLAMA_WEATHER = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
LLAMA_CASES = [
    (LLAMA_WEATHER, [ParsedCall("get_weather", {"city": "Paris"}, LLAMA_WEATHER)]),
    (f"<|python_tag|>{LLAMA_WEATHER}; {TIME}",
     [ParsedCall("get_weather", {"city": "Paris"}, f"<|python_tag|>{LLAMA_WEATHER};"),
      ParsedCall("get_time", {"zone": "UTC"}, f" {TIME}")]),
    ("The weather in Paris is {mild}.", [TextPiece("The weather in Paris is {mild}.")]),
    ('{"name": "f", "parameters": {"a": 1}} and then some text',
     [TextPiece('{"name": "f", "parameters": {"a": 1}} and then some text')]),
    ('{"not": "a call"}', [TextPiece('{"not": "a call"}')]),
    ('  {"name": "f", "param', [TextPiece('  {"name": "f", "param')]),
]


@pytest.mark.parametrize(("output", "expected"), LLAMA_CASES)
def test_llama3_json_parser_at_every_split(output: str, expected: list) -> None:
    _assert_every_split_agrees(Llama3JsonToolCallParser, output, expected)


CONSTRAINED_CASES = [
    (WEATHER, [ParsedCall("get_weather", {"city": "Zürich", "unit": "c"}, WEATHER)]),
    (f"[{WEATHER}, {TIME}]", [ParsedCall("get_weather", {"city": "Zürich", "unit": "c"}, f"[{WEATHER}, {TIME}]"),
                             ParsedCall("get_time", {"zone": "UTC"}, f"[{WEATHER}, {TIME}]")]),
    ('{"name": "get_weather", "arguments": {"ci', [TextPiece('{"name": "get_weather", "arguments": {"ci')]),
]


@pytest.mark.parametrize(("output", "expected"), CONSTRAINED_CASES)
def test_constrained_parser_at_every_split(output: str, expected: list) -> None:
    _assert_every_split_agrees(ConstrainedToolCallParser, output, expected)


def test_families_from_templates() -> None:
    assert family_of_template("{{ '<tool_call>' }}{% for tool in tools %}") is ToolCallFamily.HERMES
    assert family_of_template("{{ '<|python_tag|>' }}{% if tools %}") is ToolCallFamily.LLAMA3_JSON
    assert family_of_template(None) is ToolCallFamily.HERMES
    assert isinstance(parser_for(ToolCallFamily.LLAMA3_JSON, constrained=False), Llama3JsonToolCallParser)
    assert isinstance(parser_for(ToolCallFamily.LLAMA3_JSON, constrained=True), ConstrainedToolCallParser)
