"""The Prometheus HTTP endpoint: serves `GET /metrics` from a registry on a port of its own, in a daemon
thread, so scrapes never wait on the gRPC event loop or the engine thread.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from arbi_grpc.errors import InvalidArgumentError


class MetricsExporter:
    """A running metrics endpoint; `stop()` closes its socket."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        try:
            server, thread = start_http_server(port, addr=host, registry=registry)
        except OSError as error:
            raise InvalidArgumentError(
                "metrics_port", f"cannot bind the metrics endpoint to {host}:{port}: {error.strerror or error}"
            ) from error
        self._server: WSGIServer = server
        self._thread: threading.Thread = thread
        self.host = host
        self.port = server.server_port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
