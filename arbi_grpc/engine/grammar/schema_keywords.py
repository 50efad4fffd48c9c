"""Which JSON Schema keywords the grammar enforces: a strict constraint refuses a schema with any other keyword
(or an unknown string format), naming it and where it sits, instead of enforcing a looser schema.

The enforced set is xgrammar's JSON Schema converter's (0.2.9); annotations change nothing and are accepted.
A non-strict constraint is not checked here: unknown keywords are ignored, as JSON Schema allows.
"""

from __future__ import annotations

from typing import Any

ENFORCED_KEYWORDS = frozenset({
    "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions",
    "properties", "required", "additionalProperties", "patternProperties", "propertyNames",
    "minProperties", "maxProperties",
    "items", "prefixItems", "minItems", "maxItems",
    "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
})
ANNOTATION_KEYWORDS = frozenset({
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
    "writeOnly",
})
ENFORCED_FORMATS = frozenset({"email", "date", "time", "date-time", "duration", "uuid", "ipv4", "ipv6",
                              "hostname", "uri"})
# Keywords whose value is a map of names to subschemas, or a list of subschemas, or one subschema.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties", "propertyNames")


def unsupported_keyword(schema: Any, path: str = "#") -> str | None:
    """A description of the first keyword (or format) in `schema` the grammar would not enforce, else None."""
    if not isinstance(schema, dict):
        return None
    for keyword, value in schema.items():
        if keyword not in ENFORCED_KEYWORDS and keyword not in ANNOTATION_KEYWORDS:
            return f"keyword {keyword!r} at {path} is not supported under strict"
        if keyword == "format" and value not in ENFORCED_FORMATS:
            return (f"format {value!r} at {path} is not supported under strict; supported: "
                    f"{', '.join(sorted(ENFORCED_FORMATS))}")
    for keyword in _SCHEMA_MAPS:
        for name, subschema in (schema.get(keyword) or {}).items():
            found = unsupported_keyword(subschema, f"{path}/{keyword}/{name}")
            if found:
                return found
    for keyword in _SCHEMA_LISTS:
        for index, subschema in enumerate(schema.get(keyword) or []):
            found = unsupported_keyword(subschema, f"{path}/{keyword}/{index}")
            if found:
                return found
    for keyword in _SCHEMA_VALUES:
        found = unsupported_keyword(schema.get(keyword), f"{path}/{keyword}")
        if found:
            return found
    return None
