"""An OutputConstraint as an xgrammar `Grammar`: parsing only (milliseconds), before the costly compilation
against the vocabulary. Every constraint the grammar cannot express is an InvalidArgumentError naming the reason.

- JSON schema: xgrammar's converter, compact separators (no free whitespace, which small models repeat without
  end); `strict` refuses keywords the grammar would not enforce (`schema_keywords`) and disallows properties
  and items the schema does not list; not strict allows them, as JSON Schema does.
- JSON object: the schema `{"type": "object"}`, so any object and nothing else.
- Regex: xgrammar's regex syntax (Python's without look-around or back-references).
- EBNF: GBNF-style rules, the start rule `root`.
- Choice: one string literal per choice, `root ::= "a" | "b"`.
"""

from __future__ import annotations

import json
import re

import xgrammar as xgr

from arbi_grpc.engine.grammar.schema_keywords import unsupported_keyword
from arbi_grpc.engine.output_constraint import FIELD, ConstraintKind, OutputConstraint
from arbi_grpc.errors import InvalidArgumentError

# xgrammar prefixes its messages with a time stamp and a C++ source location.
_LOCATION_PREFIX = re.compile(r"^\s*\[[^\]]*\]\s*\S+:\d+:\s*")


def xgrammar_message(error: Exception) -> str:
    """An xgrammar error's own message, without its time stamp and source location."""
    return _LOCATION_PREFIX.sub("", str(error)).strip()


def grammar_of(constraint: OutputConstraint) -> xgr.Grammar:
    """The grammar of `constraint`; InvalidArgumentError when it does not parse or cannot be enforced."""
    field = f"{FIELD}.{constraint.kind.value}"
    kind = constraint.kind
    if kind is ConstraintKind.JSON_SCHEMA and constraint.strict:
        reason = unsupported_keyword(json.loads(constraint.text))
        if reason is not None:
            raise InvalidArgumentError(f"{field}.schema_json", reason)
    try:
        if kind is ConstraintKind.JSON_SCHEMA:
            return xgr.Grammar.from_json_schema(constraint.text, any_whitespace=False,
                                                strict_mode=constraint.strict)
        if kind is ConstraintKind.JSON_OBJECT:
            return xgr.Grammar.from_json_schema('{"type": "object"}', any_whitespace=False, strict_mode=False)
        if kind is ConstraintKind.REGEX:
            return xgr.Grammar.from_regex(constraint.text)
        if kind is ConstraintKind.EBNF_GRAMMAR:
            return xgr.Grammar.from_ebnf(constraint.text)
        return xgr.Grammar.from_ebnf(choice_ebnf(constraint.choices))
    except (RuntimeError, ValueError, TypeError) as error:  # xgrammar's parsers raise RuntimeError
        what = {ConstraintKind.JSON_SCHEMA: "the schema cannot be enforced",
                ConstraintKind.REGEX: "the regular expression does not parse",
                ConstraintKind.EBNF_GRAMMAR: "the grammar does not parse"}.get(kind, "cannot be enforced")
        raise InvalidArgumentError(field, f"{what}: {xgrammar_message(error)}") from None


def choice_ebnf(choices: tuple[str, ...]) -> str:
    """`root ::= "a" | "b"`, each choice a literal (JSON string escapes, which GBNF literals share)."""
    return "root ::= " + " | ".join(json.dumps(choice, ensure_ascii=False) for choice in choices)
