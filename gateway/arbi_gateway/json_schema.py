"""A validator for the subset of JSON Schema (2020-12, as OpenAPI 3.1 uses it) that the gateway's request
schemas are written in, so one schema both documents a route (OpenAPI) and checks its requests.

Supported keywords: type (one or a list, "null" included), enum, minimum, maximum, exclusiveMinimum,
minLength, minItems, maxItems, items, properties, required, additionalProperties (false, a schema or absent),
anyOf, description. A schema using any other keyword is refused when it is checked.
"""

from __future__ import annotations

import math
from typing import Any

from arbi_gateway.errors import ApiError, invalid

Schema = dict[str, Any]

_KEYWORDS = frozenset({
    "type", "enum", "minimum", "maximum", "exclusiveMinimum", "minLength", "minItems", "maxItems", "items",
    "properties", "required", "additionalProperties", "anyOf", "description",
})
_TYPE_NAMES = {
    "string": "a string", "integer": "an integer", "number": "a number", "boolean": "a boolean",
    "array": "an array", "object": "an object", "null": "null",
}


def check(value: Any, schema: Schema, path: str) -> Any:
    """Returns `value` (integral floats of integer fields as int) or raises a 400 naming `path`."""
    unknown = schema.keys() - _KEYWORDS
    if unknown:
        raise NotImplementedError(f"schema keywords {sorted(unknown)} at {path} are outside the supported subset")
    if "anyOf" in schema:
        return _check_any_of(value, schema["anyOf"], path)
    kind = _type_of(value, schema)
    if kind is None:
        expected = " or ".join(_TYPE_NAMES[t] for t in _types(schema))
        raise invalid(path, f"Invalid type for '{path}': expected {expected}, but got {_describe(value)}.",
                      "invalid_type")
    if kind == "integer" and isinstance(value, float):
        value = int(value)
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(repr(choice) for choice in schema["enum"])
        raise invalid(path, f"Invalid value for '{path}': {value!r} is not one of {choices}.")
    if kind in ("integer", "number"):
        _check_range(value, schema, path)
    elif kind == "string" and len(value) < schema.get("minLength", 0):
        raise invalid(path, f"Invalid value for '{path}': must be at least {schema['minLength']} characters.")
    elif kind == "array":
        return _check_array(value, schema, path)
    elif kind == "object":
        return _check_object(value, schema, path)
    return value


def describe_types(schema: Schema) -> str:
    """The accepted types of a schema, for messages ("a string or an array")."""
    if "anyOf" in schema:
        return " or ".join(describe_types(option) for option in schema["anyOf"])
    names = [_TYPE_NAMES[t] for t in _types(schema)]
    if "items" in schema:
        names = [f"{name} of {_plural(describe_types(schema['items']))}" if name == "an array" else name
                 for name in names]
    return " or ".join(names)


def _types(schema: Schema) -> list[str]:
    declared = schema.get("type", [])
    return [declared] if isinstance(declared, str) else list(declared)


def _type_of(value: Any, schema: Schema) -> str | None:
    """The first declared type `value` has, or None."""
    for kind in _types(schema):
        if (
            (kind == "null" and value is None)
            or (kind == "boolean" and isinstance(value, bool))
            or (kind == "string" and isinstance(value, str))
            or (kind == "array" and isinstance(value, list))
            or (kind == "object" and isinstance(value, dict))
            or (kind == "number" and isinstance(value, int | float) and not isinstance(value, bool))
            or (kind == "integer" and _is_integral(value))
        ):
            return kind
    return None


def _is_integral(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _check_range(value: float, schema: Schema, path: str) -> None:
    if not math.isfinite(value):
        raise invalid(path, f"Invalid value for '{path}': must be a finite number.")
    if "minimum" in schema and value < schema["minimum"]:
        raise invalid(path, f"Invalid value for '{path}': must be >= {schema['minimum']}, got {value}.")
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        raise invalid(path, f"Invalid value for '{path}': must be > {schema['exclusiveMinimum']}, got {value}.")
    if "maximum" in schema and value > schema["maximum"]:
        raise invalid(path, f"Invalid value for '{path}': must be <= {schema['maximum']}, got {value}.")


def _check_array(value: list, schema: Schema, path: str) -> list:
    if len(value) < schema.get("minItems", 0):
        raise invalid(path, f"Invalid value for '{path}': must hold at least {_items(schema['minItems'])}.")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        raise invalid(path, f"Invalid value for '{path}': must hold at most {_items(schema['maxItems'])}, "
                            f"got {len(value)}.")
    items = schema.get("items")
    return value if items is None else [check(item, items, f"{path}[{i}]") for i, item in enumerate(value)]


def _check_object(value: dict, schema: Schema, path: str) -> dict:
    properties: dict[str, Schema] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            raise invalid(_join(path, name), f"Missing required parameter: '{_join(path, name)}'.",
                          "missing_required_parameter")
    additional = schema.get("additionalProperties", True)
    if additional is False:
        for name in value:
            if name not in properties:
                raise invalid(_join(path, name), f"Unrecognized request argument supplied: '{_join(path, name)}'.",
                              "unknown_parameter")
    checked = {}
    for name, item in value.items():
        item_schema = properties.get(name, additional if isinstance(additional, dict) else None)
        checked[name] = item if item_schema is None else check(item, item_schema, _join(path, name))
    return checked


def _check_any_of(value: Any, options: list[Schema], path: str) -> Any:
    """The first alternative of matching type that accepts `value`."""
    candidates = [option for option in options if "anyOf" in option or _type_of(value, option) is not None]
    if not candidates:
        expected = " or ".join(describe_types(option) for option in options)
        raise invalid(path, f"Invalid type for '{path}': expected {expected}, but got {_describe(value)}.",
                      "invalid_type")
    errors: list[ApiError] = []
    for option in candidates:
        try:
            return check(value, option, path)
        except ApiError as error:
            errors.append(error)
    # The alternative that got furthest into the value explains the failure best.
    raise max(errors, key=lambda e: (len(e.param or ""), e.param or "", e.code != "invalid_type"))


def _items(count: int) -> str:
    return f"{count} item" if count == 1 else f"{count} items"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _plural(text: str) -> str:
    """"an array of integers" -> "arrays of integers"."""
    article, _, rest = text.partition(" ")
    if article not in ("a", "an"):
        return text
    noun, _, tail = rest.partition(" ")
    return f"{noun}s {tail}".rstrip()


def _describe(value: Any) -> str:
    for kind, name in _TYPE_NAMES.items():
        if _type_of(value, {"type": kind}) == kind and not (kind == "integer" and isinstance(value, float)):
            return name
    return type(value).__name__
