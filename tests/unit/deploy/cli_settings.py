"""The real command lines the deploy files call: `arbi-serve serve` and `arbi-gateway` argument parsing, and
the ARBI_* variable names each accepts, so that a flag or variable renamed in the code fails these tests."""

from __future__ import annotations

import argparse
from pathlib import Path

from arbi_gateway.config import GatewayConfig
from arbi_grpc.cli import _build_parser
from arbi_grpc.config_flags import add_flags

REPOSITORY = Path(__file__).resolve().parents[3]
DEPLOY = REPOSITORY / "deploy"
# Read by the model cache, not a serve flag.
_CACHE_VARIABLE = "ARBI_CACHE_DIR"


def _variables(parser: argparse.ArgumentParser) -> set[str]:
    return {"ARBI_" + option[2:].replace("-", "_").upper()
            for action in parser._actions for option in action.option_strings if option.startswith("--")}


def _gateway_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arbi-gateway", exit_on_error=False)
    add_flags(parser, GatewayConfig)
    return parser


def serve_variables() -> set[str]:
    serve = _build_parser()._subparsers._group_actions[0].choices["serve"]
    return _variables(serve) | {_CACHE_VARIABLE}


def gateway_variables() -> set[str]:
    return _variables(_gateway_parser())


def parse_serve(args: list[str]) -> argparse.Namespace:
    """Parses `arbi-serve serve ARGS` with the real parser (argparse exits on an unknown flag)."""
    return _build_parser().parse_args(["serve", *args])


def parse_gateway(args: list[str]) -> argparse.Namespace:
    return _gateway_parser().parse_args(args)
