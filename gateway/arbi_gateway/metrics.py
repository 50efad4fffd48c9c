"""The gateway's own Prometheus metrics (GET /metrics): HTTP requests by route, method and status, their
durations (a streamed response counts until its last byte), the requests in flight, and whether the
upstream server's metrics could be read for the same scrape. The registry belongs to the app, so two
gateways in one process never share counters.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class GatewayMetrics:
    """The metric families of one gateway."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("arbi_gateway_http_requests", "HTTP requests answered, by route, method "
                                "and status code.", ["route", "method", "status_code"], registry=self.registry)
        self.duration = Histogram("arbi_gateway_http_request_duration_seconds", "Time from a request's "
                                  "arrival to its response's last byte.", ["route"],
                                  buckets=_DURATION_BUCKETS, registry=self.registry)
        self.in_flight = Gauge("arbi_gateway_http_requests_in_flight", "HTTP requests being answered "
                               "(streams included).", registry=self.registry)
        self.upstream_metrics_up = Gauge("arbi_gateway_upstream_metrics_up", "1 when this scrape carries the "
                                         "upstream server's metric families, 0 when they could not be read "
                                         "or none are configured (--upstream-metrics-url).",
                                         registry=self.registry)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Counts and times every HTTP request; the route label is the matched route's path template."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self._app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = time.perf_counter()
        status_code = 500

        async def send_with_status(message: Message) -> None:
            nonlocal status_code
            if message["type"] == "http.response.start":
                status_code = message["status"]
            await send(message)

        self._metrics.in_flight.inc()
        try:
            await self._app(scope, receive, send_with_status)
        finally:
            self._metrics.in_flight.dec()
            route = scope.get("route")
            label = getattr(route, "path", "unmatched")
            self._metrics.requests.labels(label, scope["method"], str(status_code)).inc()
            self._metrics.duration.labels(label).observe(time.perf_counter() - started)
