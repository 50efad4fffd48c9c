"""The `arbi-gateway` command: builds the config from flags and `ARBI_*` variables, binds the HTTP
socket (port 0 picks a free one), prints the address it listens on, and serves with uvicorn.
"""

from __future__ import annotations

import argparse
import socket
import sys

from arbi_gateway.config import GatewayConfig
from arbi_grpc.config_flags import add_flags, resolve
from arbi_grpc.errors import ArbiError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="arbi-gateway",
        description="OpenAI-compatible REST gateway (and JSON routes of the protos) in front of arbi-serve.",
    )
    add_flags(parser, GatewayConfig)
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    args = parser.parse_args(argv)
    try:
        config = resolve(GatewayConfig, args)
    except ArbiError as error:
        print(f"arbi-gateway: error: {error}", file=sys.stderr)
        return 2
    import uvicorn

    from arbi_gateway.app import build_app
    from arbi_gateway.draining import DrainGate, DrainingServer

    listener = _listen(config.http_host, config.http_port)
    host, port = listener.getsockname()[:2]
    print(f"arbi-gateway listening on http://{host}:{port} (upstream {config.upstream})", flush=True)
    gate = DrainGate(build_app(config))
    server = DrainingServer(uvicorn.Config(
        gate, loop="asyncio", log_level=args.log_level, timeout_graceful_shutdown=5,
        access_log=args.log_level == "debug",  # a log line per request costs more than the routing
    ), gate, config.http_drain_timeout_ms / 1000)
    server.run(sockets=[listener])
    return 0


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on accepted sockets whose protocol says TCP;
    # without it a keep-alive response waits ~40 ms for the client's delayed ACK (Nagle).
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as error:
        listener.close()
        raise SystemExit(f"arbi-gateway: error: cannot bind {host}:{port}: {error}") from None
    listener.listen(2048)
    return listener
