"""What the gateway's route handlers share, built once per app start (`app.state.gateway`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from arbi_gateway.config import GatewayConfig
from arbi_gateway.json_schema import Schema
from arbi_gateway.metrics import GatewayMetrics
from arbi_gateway.token_texts import TokenTexts
from arbi_gateway.upstream import Upstream
from arbi_gateway.upstream_metrics import UpstreamMetrics


@dataclass(frozen=True)
class GatewayState:
    """The configuration, the upstream channels and metrics endpoint, and the derived request schemas and
    documents."""

    config: GatewayConfig
    upstream: Upstream
    token_texts: TokenTexts
    metrics: GatewayMetrics
    chat_schema: Schema
    completion_schema: Schema
    openapi: dict[str, Any]
    upstream_metrics: UpstreamMetrics | None
