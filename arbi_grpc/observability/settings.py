"""The observability settings: where the metrics endpoint listens and how logs are written.

A frozen dataclass like EngineConfig, so `config_flags` derives the `serve` flags and `ARBI_*` overrides.
"""

from __future__ import annotations

from dataclasses import dataclass

from arbi_grpc.config import setting
from arbi_grpc.errors import InvalidArgumentError

# The server's Prometheus endpoint, on by default: the OpenTelemetry Prometheus exporter's port. The
# gateway reads the server's families from it ("auto" upstream metrics) to serve them beside its own.
DEFAULT_METRICS_PORT = 9464
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class ObservabilityConfig:
    """The Prometheus endpoint and the log format of one server process."""

    metrics_host: str = setting("127.0.0.1", "address the Prometheus metrics endpoint binds")
    metrics_port: int = setting(DEFAULT_METRICS_PORT, "port of the Prometheus metrics endpoint, GET /metrics "
                                                      "(0 = off)")
    log_format: str = setting("text", "log records as 'text' lines or one 'json' object per line")
    log_level: str = setting("info", "least severe level logged: debug (adds one record per request), "
                                     "info, warning or error")

    def __post_init__(self) -> None:
        if not 0 <= self.metrics_port <= 65535:
            raise InvalidArgumentError("metrics_port", f"must be in [0, 65535], got {self.metrics_port}")
        if not self.metrics_host:
            raise InvalidArgumentError("metrics_host", "must not be empty")
        if self.log_format not in LOG_FORMATS:
            raise InvalidArgumentError("log_format", f"must be one of {', '.join(LOG_FORMATS)}, got "
                                                     f"{self.log_format!r}")
        if self.log_level not in LOG_LEVELS:
            raise InvalidArgumentError("log_level", f"must be one of {', '.join(LOG_LEVELS)}, got "
                                                    f"{self.log_level!r}")
