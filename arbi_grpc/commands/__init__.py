"""The operator commands of `arbi-serve`: doctor, config, plan, ps and stop.

Each module adds its subcommand with `add_parser`; `register` adds them all to the CLI. Modules import
nothing heavy at import time: torch only where a command needs it, so `doctor`, `config`, `plan`, `ps` and
`stop` all run without it.
"""

from __future__ import annotations

import argparse

from arbi_grpc.commands import config_command, doctor, instances, plan


def register(commands: argparse._SubParsersAction) -> None:
    """Adds the operator subcommands to the CLI's subparsers."""
    for module in (doctor, config_command, plan, instances):
        module.add_parser(commands)
