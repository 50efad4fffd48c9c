"""The `arbi-serve` command line: serve, run, chat, talk, pull, list, calibrate, and the operator commands
doctor, config, plan, ps and stop (implemented in `commands/`).

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
from typing import TYPE_CHECKING

from arbi_grpc import __version__
from arbi_grpc.commands import calibrate as calibrate_command
from arbi_grpc.commands import register as register_operator_commands
from arbi_grpc.commands import talk as talk_command
from arbi_grpc.commands.paths import run_state_dir
from arbi_grpc.errors import ArbiError
from arbi_grpc.shutdown_signals import ShutdownSignals

if TYPE_CHECKING:
    from arbi_grpc.observability.settings import ObservabilityConfig
    from arbi_grpc.server import GrpcServer

DEFAULT_PORT = 50051
DEFAULT_HTTP_PORT = 8000
_TOKEN_ENV = "ARBI_GENERATE_TOKEN"  # the same variable sets the server's generate_token
_SERVE_BOOT_TIMEOUT_S = 600.0
_CHAT_WAIT_S = 120.0
_ENGINE_FAULT_EXIT = 70  # EX_SOFTWARE: the engine thread died; an orchestrator restarts the process


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (ArbiError, NotImplementedError) as error:
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
    _add_config_flags(serve)
    serve.set_defaults(handler=_serve)

    run = commands.add_parser("run", help="boot a server if none is running, then chat in the terminal")
    run.add_argument("model", nargs="?", default=None, help="model name or path (default: embedded)")
    run.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"gRPC port (default {DEFAULT_PORT})")
    run.add_argument("--max-tokens", type=int, default=512, help="most tokens per reply")
    run.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0 = greedy)")
    run.add_argument("--http-port", type=int, default=DEFAULT_HTTP_PORT,
                     help=f"port of the REST/OpenAI gateway started beside the server (default "
                          f"{DEFAULT_HTTP_PORT}; 0: none)")
    run.set_defaults(handler=_run)

    chat = commands.add_parser("chat", help="send one chat message to a running server")
    chat.add_argument("prompt", nargs="?", help="the message (read from stdin when omitted)")
    chat.add_argument("--url", default=f"127.0.0.1:{DEFAULT_PORT}", help="server address (host:port)")
    chat.add_argument("--model", default="", help="model name (default: the server's default model)")
    chat.add_argument("--max-tokens", type=int, default=512, help="most tokens in the reply")
    chat.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0 = greedy)")
    chat.add_argument("--token", default=os.environ.get(_TOKEN_ENV, ""),
                      help=f"the server's generate token, when it requires one (default: ${_TOKEN_ENV})")
    chat.add_argument("--wait-s", type=float, default=_CHAT_WAIT_S,
                      help=f"how long to wait for the server to become ready, in seconds (default "
                           f"{_CHAT_WAIT_S:.0f}; 0: do not wait)")
    chat.add_argument("--ca-file", default="", help="PEM CA that signed the server's TLS certificate (default: "
                                                    "plaintext)")
    chat.add_argument("--tls-cert-file", default="", help="PEM client certificate, for a server requiring mTLS")
    chat.add_argument("--tls-key-file", default="", help="PEM key of --tls-cert-file")
    chat.set_defaults(handler=_chat)

    talk_command.add_parser(commands)

    pull = commands.add_parser("pull", help="import a model into the local cache without serving it")
    pull.add_argument("model", nargs="?", default=None, help="model name or path (default: embedded)")
    pull.set_defaults(handler=_pull)

    list_models = commands.add_parser("list", help="list models in the local cache")
    list_models.set_defaults(handler=_list)
    calibrate_command.add_parser(commands)
    register_operator_commands(commands)
    return parser


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.config_flags import add_flags
    from arbi_grpc.observability.settings import ObservabilityConfig
    from arbi_grpc.server_config import ServerConfig

    add_flags(parser, EngineConfig)
    add_flags(parser, ServerConfig)
    add_flags(parser, ObservabilityConfig)


def _serve(args: argparse.Namespace) -> int:
    """Starts the server (health NOT_SERVING), loads the model (SERVING), then serves until stopped."""
    from arbi_grpc.config_flags import resolve
    from arbi_grpc.observability.logging_setup import configure_logging
    from arbi_grpc.observability.settings import ObservabilityConfig

    observability = resolve(ObservabilityConfig, args)
    logs = configure_logging(observability)
    try:
        return _serve_with_logs(args, observability)
    finally:
        logs.stop()


def _serve_with_logs(args: argparse.Namespace, observability: ObservabilityConfig) -> int:
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.config_flags import resolve
    from arbi_grpc.model_specs import served_model_configs
    from arbi_grpc.server import GrpcServer
    from arbi_grpc.server_config import ServerConfig

    engine_config, server_config = resolve(EngineConfig, args), resolve(ServerConfig, args)
    model_configs = served_model_configs(engine_config)
    signals = ShutdownSignals().install()  # before the model loads: a SIGTERM meanwhile drains once it is up
    server = GrpcServer(engine_config, server_config.address, server_config, observability=observability).start()
    log = logging.getLogger("arbi_grpc")
    log.info("gRPC server listening on %s; loading %s", server.target, ", ".join(c.model for c in model_configs))
    if server.metrics_exporter is not None:
        log.info("Prometheus metrics on %s", server.metrics_exporter.url)
    if server.credentials.admin_token_path is not None:
        log.info("admin token: %s", server.credentials.admin_token_path)
    try:
        server.load_models(model_configs)
        server.wait_for_embedding_models()
        log.info("ready: serving %s", ", ".join([*(m.name for m in server.host.models()), *server.embeddings.names]))
        fault = signals.wait_for_stop(lambda: _engine_fault(server))
    except BaseException:
        server.stop()
        raise
    if fault is not None:
        log.error("exiting so that the process is restarted: %s", fault)
        server.stop()
        return _ENGINE_FAULT_EXIT
    log.info("%s: draining (up to %d ms), new requests are refused", signals.signal_name,
             server_config.drain_timeout_ms)
    ended = server.drain_and_stop(server_config.drain_timeout_ms / 1000)
    log.info("drained and stopped (%d requests ended unfinished at the drain timeout)", ended)
    return 0


def _engine_fault(server: GrpcServer) -> str | None:
    """Why a resident model's engine can no longer serve (its thread died), or None."""
    for served in server.host.models():
        if served.engine.failure is not None:
            return f"model {served.name!r}: {served.engine.failure}"
    return None


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
    if args.http_port:
        _start_gateway(target, args.http_port)
    options = ChatOptions(max_output_tokens=args.max_tokens, temperature=args.temperature,
                          token=os.environ.get(_TOKEN_ENV, ""))
    return _repl(target, options)


def _start_gateway(upstream: str, http_port: int) -> None:
    """Starts the REST/OpenAI gateway in the background unless one for `upstream` answers already."""
    from arbi_gateway.process import GatewayProcess, gateway_upstream

    url = f"http://127.0.0.1:{http_port}"
    running = gateway_upstream(url)
    if running is None:
        log_path = _state_dir() / f"gateway-{http_port}.log"
        arguments = ["--upstream", upstream, "--http-port", str(http_port)]
        try:
            gateway = GatewayProcess.spawn(arguments, log_path, detach=True)
        except RuntimeError:
            print(f"arbi-serve: warning: the gateway did not start; see {log_path}", file=sys.stderr)
            return
        (_state_dir() / f"gateway-{http_port}.pid").write_text(f"{gateway.process.pid}\n")
    elif running != upstream:
        print(f"arbi-serve: warning: port {http_port} serves a gateway for {running}; none started for "
              f"{upstream}", file=sys.stderr)
        return
    print(f"OpenAI-compatible API on {url}/v1", file=sys.stderr)


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

    from arbi_client.tls import ChannelTls
    from arbi_grpc.chat_client import ChatOptions, grpc_target, is_serving, stream_chat, wait_until_serving

    tls = ChannelTls(args.ca_file, args.tls_cert_file, args.tls_key_file)
    prompt = args.prompt if args.prompt is not None else sys.stdin.read().strip()
    target = grpc_target(args.url)
    if args.wait_s > 0 and not is_serving(target, tls=tls):
        print(f"waiting up to {args.wait_s:.0f} s for {target} to become ready ...", file=sys.stderr)
        if not wait_until_serving(target, args.wait_s, tls=tls):
            print(f"arbi-serve: error: {target} did not become ready within {args.wait_s:.0f} s", file=sys.stderr)
            return 1
    options = ChatOptions(max_output_tokens=args.max_tokens, temperature=args.temperature, model=args.model,
                          token=args.token, tls=tls)
    try:
        for piece in stream_chat(target, [{"role": "user", "content": prompt}], options):
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
    path = run_state_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path
