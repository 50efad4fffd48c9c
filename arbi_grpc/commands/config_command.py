"""`arbi-serve config flags | explain FLAG | resolve [FLAGS]`: the `serve` settings, their flags and
`ARBI_*` environment variables, and what a server started here would run with.

The settings are the fields of the serve config classes; precedence, lowest first: the default, the
environment variable, the flag (as `config_flags.resolve` applies it). Secret settings are never printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import typing
from collections.abc import Mapping
from typing import Any

from arbi_grpc.commands.table import print_table
from arbi_grpc.config import EngineConfig
from arbi_grpc.config_flags import add_flags, env_name, flag_name, resolve
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.observability.settings import ObservabilityConfig
from arbi_grpc.server_config import ServerConfig

SERVE_CONFIG_CLASSES: tuple[type, ...] = (EngineConfig, ServerConfig, ObservabilityConfig)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One serve setting: the config class that declares it and its dataclass field."""

    config_class: type
    field: dataclasses.Field

    @property
    def name(self) -> str:
        return self.field.name

    @property
    def secret(self) -> bool:
        return not self.field.repr  # declared with repr=False: never logged or printed

    @property
    def type_name(self) -> str:
        return typing.get_type_hints(self.config_class)[self.name].__name__

    def shown(self, value: Any) -> Any:
        if self.secret:
            return "(set)" if value else "(not set)"
        return value


def serve_settings() -> list[Setting]:
    return [Setting(cls, field) for cls in SERVE_CONFIG_CLASSES for field in dataclasses.fields(cls)]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("config", help="list, explain and resolve the serve settings")
    actions = parser.add_subparsers(title="actions", required=True, metavar="ACTION")
    flags = actions.add_parser("flags", help="every serve flag with its environment variable and default")
    flags.set_defaults(handler=_flags)
    explain = actions.add_parser("explain", help="one setting in full, with its value here and now")
    explain.add_argument("setting_name", metavar="FLAG", nargs="?",
                         help="a setting's flag (--kv-cache-memory-mib or kv-cache-memory-mib), field or ARBI_* name")
    named = explain.add_argument_group("or the flag itself")
    for setting in serve_settings():
        named.add_argument(flag_name(setting.name), dest="setting_flag", action="store_const", const=setting.name,
                           help=argparse.SUPPRESS)
    explain.set_defaults(handler=_explain)
    resolved = actions.add_parser("resolve", help="the settings `serve` would run with (defaults < env < flags)")
    resolved.add_argument("--json", action="store_true", help="print a JSON object")
    for config_class in SERVE_CONFIG_CLASSES:
        add_flags(resolved, config_class)
    resolved.set_defaults(handler=_resolve)


def _flags(args: argparse.Namespace) -> int:
    rows = [(flag_name(s.name), env_name(s.name), s.type_name, repr(s.shown(s.field.default)),
             s.field.metadata.get("help", "")) for s in serve_settings()]
    print_table(("FLAG", "ENVIRONMENT", "TYPE", "DEFAULT", "MEANING"), rows)
    return 0


def _explain(args: argparse.Namespace) -> int:
    text = args.setting_flag or args.setting_name
    if text is None:
        raise InvalidArgumentError("FLAG", "name the setting to explain, e.g. --kv-cache-memory-mib")
    setting = find_setting(text)
    environ_value = os.environ.get(env_name(setting.name))
    value, source = resolved_values(argparse.Namespace(), os.environ)[setting.name]
    print(f"{flag_name(setting.name)}  ({setting.config_class.__name__}.{setting.name}, {setting.type_name})")
    print(f"  {setting.field.metadata.get('help', '')}")
    print(f"  default:     {setting.shown(setting.field.default)!r}")
    in_effect = "not set" if environ_value is None else f"set to {setting.shown(environ_value)!r}"
    print(f"  environment: {env_name(setting.name)} ({in_effect})")
    print(f"  value now:   {setting.shown(value)!r} (from {source}; a flag on `serve` overrides it)")
    return 0


def _resolve(args: argparse.Namespace) -> int:
    values = resolved_values(args, os.environ)
    settings = {s.name: s for s in serve_settings()}
    if args.json:
        document = {name: {"value": settings[name].shown(value), "source": source}
                    for name, (value, source) in values.items()}
        print(json.dumps(document, indent=2))
        return 0
    rows = [(name, repr(settings[name].shown(value)), source) for name, (value, source) in values.items()]
    print_table(("SETTING", "VALUE", "FROM"), rows)
    return 0


def find_setting(text: str) -> Setting:
    """The setting named by a flag, a field name or an environment variable."""
    name = text.strip().lstrip("-").replace("-", "_").lower()
    name = name.removeprefix("arbi_") if text.strip().upper().startswith("ARBI_") else name
    settings = {s.name: s for s in serve_settings()}
    if name in settings:
        return settings[name]
    close = [candidate for candidate in settings if name in candidate][:3]
    close = close or difflib.get_close_matches(name, settings, n=3)
    hint = f"; did you mean {', '.join(flag_name(c) for c in close)}?" if close else "; see `arbi-serve config flags`"
    raise InvalidArgumentError("FLAG", f"no serve setting is called {text!r}{hint}")


def resolved_values(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    """Each setting's value as `serve` would resolve it, with where it came from; validates like `serve`."""
    values: dict[str, tuple[Any, str]] = {}
    for config_class in SERVE_CONFIG_CLASSES:
        config = resolve(config_class, args, environ)
        for field in dataclasses.fields(config_class):
            if getattr(args, field.name, None) is not None:
                source = f"flag {flag_name(field.name)}"
            elif env_name(field.name) in environ:
                source = f"environment {env_name(field.name)}"
            else:
                source = "default"
            values[field.name] = (getattr(config, field.name), source)
    return values

