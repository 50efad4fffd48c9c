"""Derives CLI flags and `ARBI_*` environment overrides from config dataclasses.

Precedence, lowest first: the field default, the environment variable `ARBI_<FIELD>`, the CLI flag
`--<field-with-dashes>`. Values from the environment are parsed with the field's type; a bad one is an
InvalidArgumentError naming the variable.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from arbi_grpc.errors import InvalidArgumentError

ConfigT = TypeVar("ConfigT")
ENV_PREFIX = "ARBI_"


def env_name(field_name: str) -> str:
    return ENV_PREFIX + field_name.upper()


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def _field_type(config_class: type, field: dataclasses.Field) -> type:
    return typing.get_type_hints(config_class)[field.name]


def _parse(kind: type, text: str, source: str) -> Any:
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise InvalidArgumentError(source, f"expected a boolean (true/false), got {text!r}")
    try:
        return kind(text)
    except ValueError:
        raise InvalidArgumentError(source, f"expected {kind.__name__}, got {text!r}") from None


def add_flags(parser: argparse.ArgumentParser, config_class: type) -> None:
    """One flag per field; unset flags stay None so the environment and defaults apply."""
    group = parser.add_argument_group(f"{config_class.__name__} settings (env {ENV_PREFIX}<NAME>)")
    for field in dataclasses.fields(config_class):
        kind = _field_type(config_class, field)
        help_text = f"{field.metadata.get('help', '')} (default {field.default!r}; env {env_name(field.name)})"
        help_text = help_text.replace("%", "%%")  # argparse formats help with %: a literal "0.5%" broke --help
        if kind is bool:
            group.add_argument(flag_name(field.name), dest=field.name, default=None,
                               action=argparse.BooleanOptionalAction, help=help_text)
        elif field.metadata.get("repeat"):
            group.add_argument(flag_name(field.name), dest=field.name, default=None, action="append",
                               help=f"{help_text}; may be repeated")
        else:
            group.add_argument(flag_name(field.name), dest=field.name, default=None,
                               type=lambda text, k=kind, f=field.name: _parse(k, text, flag_name(f)),
                               help=help_text)


def resolve(config_class: type[ConfigT], args: argparse.Namespace | None = None,
            environ: Mapping[str, str] | None = None) -> ConfigT:
    """Builds the config from defaults, then the environment, then parsed flags."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for field in dataclasses.fields(config_class):
        kind = _field_type(config_class, field)
        if env_name(field.name) in environ:
            values[field.name] = _parse(kind, environ[env_name(field.name)], env_name(field.name))
        flag_value = getattr(args, field.name, None) if args is not None else None
        if isinstance(flag_value, list):  # a repeated flag
            flag_value = ",".join(flag_value)
        if flag_value is not None:
            values[field.name] = flag_value
    return config_class(**values)
