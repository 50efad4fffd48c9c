"""The structured-output case set (`tests/data/structured_output/cases.json`): bounded JSON schemas, regexes,
a choice list and an EBNF arithmetic grammar (xgrammar's dialect), each with a prompt and the check its
output must pass. Shared by the end-to-end tests and `benchmarks/structured_output.py`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from arbi_client.arbi.v1 import generation_types_pb2 as types_pb

CASES_FILE = Path(__file__).parent / "data" / "structured_output" / "cases.json"
# Enough for the longest output of every case (SmolLM2, greedy); the grammar ends each output before it.
MAX_OUTPUT_TOKENS = 96


@dataclass(frozen=True)
class Case:
    """One constraint: its name, the question asked, the proto constraint and the check of an output (raises
    AssertionError, or a jsonschema/JSON error, when the output is wrong)."""

    name: str
    question: str
    constraint: types_pb.OutputConstraint
    check: Callable[[str], None]


@cache
def raw_cases() -> dict[str, Any]:
    return json.loads(CASES_FILE.read_text())


def schema_cases() -> list[Case]:
    return [Case(f"schema:{entry['name']}", f"Give an example of {entry['describe']} as JSON.",
                 types_pb.OutputConstraint(json_schema=types_pb.JsonSchemaConstraint(
                     schema_json=json.dumps(entry["schema"])), strict=True),
                 _schema_check(entry["schema"]))
            for entry in raw_cases()["schemas"]]


def text_cases() -> list[Case]:
    """The regexes, the choice list and the EBNF grammar."""
    data = raw_cases()
    cases = [Case(f"regex:{entry['name']}", f"Write {entry['describe']}.",
                  types_pb.OutputConstraint(regex=entry["regex"]), _regex_check(entry["regex"]))
             for entry in data["regexes"]]
    choices = data["choices"]["choices"]
    cases.append(Case("choice", f"Name {data['choices']['describe']}.",
                      types_pb.OutputConstraint(choice=types_pb.ChoiceConstraint(choices=choices)),
                      lambda text: _expect(text in choices, text)))
    arithmetic = data["ebnf_arithmetic"]
    cases.append(Case("ebnf:arithmetic", f"Write {arithmetic['describe']}.",
                      types_pb.OutputConstraint(ebnf_grammar=arithmetic["grammar"]), check_arithmetic))
    return cases


def _expect(condition: bool, text: str) -> None:
    if not condition:
        raise AssertionError(f"output {text!r} fails its constraint")


def _schema_check(schema: dict[str, Any]) -> Callable[[str], None]:
    validator = jsonschema.Draft202012Validator(schema)
    return lambda text: validator.validate(json.loads(text))


def _regex_check(regex: str) -> Callable[[str], None]:
    return lambda text: _expect(re.fullmatch(regex, text) is not None, text)


class _Arithmetic:
    """Recursive descent over the case grammar: expr = term (+|- term)*, term = factor (*|/ factor)*,
    factor = number | ( expr ), number = [1-9][0-9]?; evaluates as it parses."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def value(self) -> float:
        result = self.expr()
        _expect(self.at == len(self.text), self.text)
        return result

    def expr(self) -> float:
        result = self.term()
        while self._take("+-"):
            result = result + self.term() if self.text[self.at - 1] == "+" else result - self.term()
        return result

    def term(self) -> float:
        result = self.factor()
        while self._take("*/"):
            result = result * self.factor() if self.text[self.at - 1] == "*" else result / self.factor()
        return result

    def factor(self) -> float:
        if self._take("("):
            result = self.expr()
            _expect(self._take(")"), self.text)
            return result
        number = re.compile(r"[1-9][0-9]?").match(self.text, self.at)
        _expect(number is not None, self.text)
        self.at = number.end()
        return float(number.group())

    def _take(self, characters: str) -> bool:
        if self.at < len(self.text) and self.text[self.at] in characters:
            self.at += 1
            return True
        return False


def check_arithmetic(text: str) -> None:
    """The output parses under the grammar, and its value is Python's for the same (now known safe) text."""
    assert _Arithmetic(text).value() == eval(text, {"__builtins__": {}})  # noqa: S307 (checked above)
