"""The `arbi-serve` command line: serve, run, chat, pull, list.

Only `serve`, `run` (when it boots a server), `pull` and `list` import the server stack; `chat` needs
grpcio alone, so it works on a client-only install.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from pathlib import Path

from arbi_grpc import __version__
from arbi_grpc.errors import ArbiError

DEFAULT_PORT = 50051
_SERVE_BOOT_TIMEOUT_S = 600.0


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except ArbiError as error:
        print(f"arbi-serve: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="arbi-serve", description="Self-hosted LLM serving engine with a gRPC API."
    )
    parser.add_argument("--version", action="version", version=f"arbi-serve {__version__}")
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="serve a model over gRPC")
    _add_engine_flags(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"gRPC port (default {DEFAULT_PORT})")
    serve.set_defaults(handler=_serve)

    run = commands.add_parser("run", help="boot a server if none is running, then chat in the terminal")
    run.add_argument("model", nargs="?", default=None, help="model name or path (default: embedded)")
    run.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"gRPC port (default {DEFAULT_PORT})")
    run.add_argument("--max-tokens", type=int, default=512, help="most tokens per reply")
    run.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0 = greedy)")
    run.set_defaults(handler=_run)

    chat = commands.add_parser("chat", help="send one chat message to a running server")
    chat.add_argument("prompt", nargs="?", help="the message (read from stdin when omitted)")
    chat.add_argument("--url", default=f"127.0.0.1:{DEFAULT_PORT}", help="server address (host:port)")
    chat.add_argument("--model", default="", help="model name (default: the resident model)")
    chat.add_argument("--max-tokens", type=int, default=512, help="most tokens in the reply")
    chat.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0 = greedy)")
    chat.set_defaults(handler=_chat)

    pull = commands.add_parser("pull", help="import a model into the local cache without serving it")
    pull.add_argument("model", nargs="?", default=None, help="model name or path (default: embedded)")
    pull.set_defaults(handler=_pull)

    list_models = commands.add_parser("list", help="list models in the local cache")
    list_models.set_defaults(handler=_list)
    return parser


def _add_engine_flags(parser: argparse.ArgumentParser) -> None:
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.config_flags import add_flags

    add_flags(parser, EngineConfig)


def _engine_config(args: argparse.Namespace):
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.config_flags import resolve

    return resolve(EngineConfig, args)


def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from arbi_grpc.server import GrpcServer
    from arbi_grpc.serving import build_served_model

    server = GrpcServer(build_served_model(_engine_config(args)), f"{args.host}:{args.port}").start()
    logging.getLogger("arbi_grpc").info("gRPC server listening on %s", server.target)
    try:
        server.wait()
    finally:
        server.stop()
    return 0


def _run(args: argparse.Namespace) -> int:
    from arbi_grpc.chat_client import ChatOptions, is_serving, wait_until_serving

    target = f"127.0.0.1:{args.port}"
    if not is_serving(target):
        command = [sys.executable, "-m", "arbi_grpc", "serve", "--port", str(args.port)]
        if args.model:
            command += ["--model", args.model]
        log_path = _state_dir() / f"server-{args.port}.log"
        print(f"starting arbi-serve on {target} (log: {log_path}) ...", file=sys.stderr)
        with open(log_path, "ab") as log_file:
            process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        (_state_dir() / f"server-{args.port}.pid").write_text(f"{process.pid}\n")
        if not wait_until_serving(target, _SERVE_BOOT_TIMEOUT_S, lambda: process.poll() is None):
            print(f"arbi-serve: error: the server did not become ready; see {log_path}", file=sys.stderr)
            return 1
    options = ChatOptions(max_output_tokens=args.max_tokens, temperature=args.temperature)
    return _repl(target, options)


def _repl(target: str, options) -> int:
    from arbi_grpc.chat_client import stream_chat

    print(f"connected to {target}; an empty line or Ctrl-D ends the chat", file=sys.stderr)
    history: list[dict[str, str]] = []
    while True:
        try:
            line = input(">>> ").strip()
        except EOFError:
            print(file=sys.stderr)
            return 0
        if not line:
            return 0
        history.append({"role": "user", "content": line})
        reply = []
        for piece in stream_chat(target, history, options):
            reply.append(piece)
            print(piece, end="", flush=True)
        print()
        history.append({"role": "assistant", "content": "".join(reply)})


def _chat(args: argparse.Namespace) -> int:
    import grpc

    from arbi_grpc.chat_client import ChatOptions, grpc_target, stream_chat

    prompt = args.prompt if args.prompt is not None else sys.stdin.read().strip()
    options = ChatOptions(max_output_tokens=args.max_tokens, temperature=args.temperature, model=args.model)
    try:
        for piece in stream_chat(grpc_target(args.url), [{"role": "user", "content": prompt}], options):
            print(piece, end="", flush=True)
    except grpc.RpcError as error:
        print(f"\narbi-serve: error: {error.code().name}: {error.details()}", file=sys.stderr)
        return 1
    print()
    return 0


def _pull(args: argparse.Namespace) -> int:
    from arbi_grpc.models.model_cache import DEFAULT_MODEL, pull

    resolved = pull(args.model or DEFAULT_MODEL)
    print(f"{resolved.name}\t{resolved.directory}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from arbi_grpc.models.model_cache import list_cached_models

    for model in list_cached_models():
        print(f"{model.name}\t{model.size_bytes / 2**20:.0f} MiB\t{model.directory}")
    return 0


def _state_dir() -> Path:
    root = Path(os.environ.get("ARBI_CACHE_DIR", Path.home() / ".cache" / "arbi-serve"))
    path = root / "run"
    path.mkdir(parents=True, exist_ok=True)
    return path
