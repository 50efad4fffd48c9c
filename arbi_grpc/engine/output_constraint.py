"""The typed output constraint of a request (JSON schema, any JSON object, regex, EBNF grammar, choice).

Built from the proto's OutputConstraint; validation here covers what needs no grammar compiler (the kind,
non-empty text, a JSON-parsable schema, a non-empty choice list). Whether a schema, regex or grammar can be
enforced is decided when it is compiled, which also refuses with InvalidArgumentError.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

from arbi_grpc.errors import InvalidArgumentError

FIELD = "sampling.output_constraint"


class ConstraintKind(enum.Enum):
    """What the constraint's `text` is."""

    JSON_SCHEMA = "json_schema"
    JSON_OBJECT = "json_object"
    REGEX = "regex"
    EBNF_GRAMMAR = "ebnf_grammar"
    CHOICE = "choice"


@dataclass(frozen=True)
class OutputConstraint:
    """A constraint on the generated text.

    text: the JSON schema (JSON text), the regex or the EBNF grammar; empty for JSON_OBJECT and CHOICE.
    choices: the allowed strings for CHOICE, else empty.
    strict: for JSON_SCHEMA, refuse unsupported keywords and disallow unlisted properties.
    """

    kind: ConstraintKind
    text: str = ""
    choices: tuple[str, ...] = field(default_factory=tuple)
    strict: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.kind, ConstraintKind):
            raise InvalidArgumentError(FIELD, f"unknown constraint kind {self.kind!r}")
        object.__setattr__(self, "choices", tuple(self.choices))
        name = f"{FIELD}.{self.kind.value}"
        if self.kind is ConstraintKind.CHOICE:
            if not self.choices:
                raise InvalidArgumentError(f"{name}.choices", "the choice list is empty")
            if any(not isinstance(choice, str) or not choice for choice in self.choices):
                raise InvalidArgumentError(f"{name}.choices", "each choice must be a non-empty string")
        elif self.choices:
            raise InvalidArgumentError(name, "choices are only allowed with the choice constraint")
        if self.kind in (ConstraintKind.JSON_SCHEMA, ConstraintKind.REGEX, ConstraintKind.EBNF_GRAMMAR):
            if not isinstance(self.text, str) or not self.text.strip():
                raise InvalidArgumentError(name, "must not be empty")
        if self.kind is ConstraintKind.JSON_SCHEMA:
            try:
                schema = json.loads(self.text)
            except json.JSONDecodeError as error:
                raise InvalidArgumentError(f"{name}.schema_json", f"is not valid JSON: {error}") from None
            if not isinstance(schema, (dict, bool)):
                raise InvalidArgumentError(f"{name}.schema_json", "must be a JSON object (or true/false)")

    @property
    def cache_key(self) -> str:
        """A text that identifies the grammar this constraint compiles to (with the tokenizer's fingerprint
        it keys the compile cache)."""
        payload = list(self.choices) if self.kind is ConstraintKind.CHOICE else self.text
        return json.dumps([self.kind.value, payload, self.strict], ensure_ascii=False)
