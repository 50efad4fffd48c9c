"""The gateway's configuration: one frozen dataclass, validated at construction.

`arbi_grpc.config_flags` derives the `arbi-gateway` flags and `ARBI_*` environment overrides from it, as
for the server's configs; field names say they belong to the gateway's HTTP side or its upstream so they
do not collide with the server's variables.
"""

from __future__ import annotations

from dataclasses import dataclass

from arbi_client.tls import ChannelTls
from arbi_grpc.config import setting
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.observability.settings import DEFAULT_METRICS_PORT

DEFAULT_HTTP_PORT = 8000
_AUTO = "auto"


@dataclass(frozen=True)
class GatewayConfig:
    """Where the gateway listens, which gRPC server it forwards to, and what it bounds."""

    upstream: str = setting("127.0.0.1:50051", "gRPC address of the arbi-serve server (host:port)")
    http_host: str = setting("127.0.0.1", "address the HTTP gateway binds")
    http_port: int = setting(DEFAULT_HTTP_PORT, "HTTP port of the gateway (0 picks a free one)")
    upstream_channel_count: int = setting(4, "gRPC channels to the upstream, used round robin")
    upstream_tls_ca_file: str = setting(
        "", "PEM CA that signed the upstream's TLS certificate (empty: plaintext to the upstream)"
    )
    upstream_tls_cert_file: str = setting("", "PEM client certificate for an upstream that requires mTLS")
    upstream_tls_key_file: str = setting("", "PEM key of --upstream-tls-cert-file")
    http_drain_timeout_ms: int = setting(
        30_000, "after SIGTERM or SIGINT, how long HTTP requests in flight may finish (new ones get 503), in ms"
    )
    max_choice_count: int = setting(8, "largest `n` (choices per prompt) a request may ask for")
    max_prompt_count: int = setting(16, "most prompts in one /v1/completions request")
    max_output_tokens_limit: int = setting(
        0, "largest max_tokens a request may ask for (0: only the server's context limit applies)"
    )
    upstream_metrics_url: str = setting(
        _AUTO, f"the server's Prometheus endpoint, whose families GET /metrics appends to the gateway's "
               f"('{_AUTO}': port {DEFAULT_METRICS_PORT} of the upstream's host, the server's default; "
               f"empty: the gateway's families only)"
    )

    def __post_init__(self) -> None:
        if not self.upstream or ":" not in self.upstream:
            raise InvalidArgumentError("upstream", f"must be host:port, got {self.upstream!r}")
        if not self.http_host:
            raise InvalidArgumentError("http_host", "must not be empty")
        if not 0 <= self.http_port <= 65535:
            raise InvalidArgumentError("http_port", f"must be in [0, 65535], got {self.http_port}")
        for name in ("upstream_channel_count", "max_choice_count", "max_prompt_count"):
            if getattr(self, name) < 1:
                raise InvalidArgumentError(name, f"must be >= 1, got {getattr(self, name)}")
        url = self.upstream_metrics_url
        if url not in ("", _AUTO) and not url.startswith(("http://", "https://")):
            raise InvalidArgumentError("upstream_metrics_url",
                                       f"must be '{_AUTO}', empty or an http(s) URL, got {url!r}")
        if self.http_drain_timeout_ms < 0:
            raise InvalidArgumentError("http_drain_timeout_ms", f"must be >= 0, got {self.http_drain_timeout_ms}")
        try:
            self.upstream_tls
        except ValueError as error:
            raise InvalidArgumentError("upstream_tls_cert_file", str(error)) from None
        if self.max_output_tokens_limit < 0:
            raise InvalidArgumentError(
                "max_output_tokens_limit", f"must be >= 0, got {self.max_output_tokens_limit}"
            )

    @property
    def upstream_tls(self) -> ChannelTls:
        return ChannelTls(self.upstream_tls_ca_file, self.upstream_tls_cert_file, self.upstream_tls_key_file)

    @property
    def upstream_metrics_endpoint(self) -> str:
        """The URL GET /metrics reads the server's families from; empty when none is read."""
        if self.upstream_metrics_url != _AUTO:
            return self.upstream_metrics_url
        host = self.upstream.rsplit(":", 1)[0]
        return f"http://{host}:{DEFAULT_METRICS_PORT}/metrics"
