"""The gateway's ASGI app: OpenAI routes, its own routes, and the annotated proto routes, with OpenAI-style
errors for everything that is not a proto route and the metrics middleware around it all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from arbi_gateway import audio_routes, batch_routes, embedding_routes, file_routes, openai_routes, service_routes
from arbi_gateway.config import GatewayConfig
from arbi_gateway.errors import ApiError
from arbi_gateway.gateway_state import GatewayState
from arbi_gateway.http_rules import http_bindings, public_services
from arbi_gateway.metrics import GatewayMetrics, MetricsMiddleware
from arbi_gateway.openai_schemas import chat_request_schema, completion_request_schema
from arbi_gateway.openapi import openapi_document
from arbi_gateway.proto_routes import proto_routes
from arbi_gateway.token_texts import TokenTexts
from arbi_gateway.upstream import Upstream
from arbi_gateway.upstream_metrics import UpstreamMetrics
from arbi_grpc import __version__


def build_app(config: GatewayConfig) -> Starlette:
    """The gateway for `config`; its upstream channels open when the app starts (ASGI lifespan)."""
    metrics = GatewayMetrics()
    bindings = http_bindings(public_services())
    chat_schema, completion_schema = chat_request_schema(config), completion_request_schema(config)
    document = openapi_document(__version__, chat_schema, completion_schema, bindings)
    metrics_url = config.upstream_metrics_endpoint
    upstream_metrics = UpstreamMetrics(metrics_url) if metrics_url else None

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        upstream = Upstream(config.upstream, config.upstream_channel_count, config.upstream_tls)
        app.state.gateway = GatewayState(config, upstream, TokenTexts(upstream), metrics, chat_schema,
                                         completion_schema, document, upstream_metrics)
        try:
            yield
        finally:
            await upstream.close()

    routes = [
        Route("/v1/chat/completions", openai_routes.chat_completions, methods=["POST"]),
        Route("/v1/completions", openai_routes.completions, methods=["POST"]),
        Route("/v1/audio/transcriptions", audio_routes.transcriptions, methods=["POST"]),
        Route("/v1/audio/speech", audio_routes.speech, methods=["POST"]),
        *embedding_routes.ROUTES,
        Route("/v1/files", file_routes.upload_file, methods=["POST"]),
        Route("/v1/files", file_routes.list_files, methods=["GET"]),
        Route("/v1/files/{file_id}", file_routes.retrieve_file, methods=["GET"]),
        Route("/v1/files/{file_id}", file_routes.delete_file, methods=["DELETE"]),
        Route("/v1/files/{file_id}/content", file_routes.file_content, methods=["GET"]),
        Route("/v1/batches", batch_routes.create_batch, methods=["POST"]),
        Route("/v1/batches", batch_routes.list_batches, methods=["GET"]),
        Route("/v1/batches/{batch_id}", batch_routes.retrieve_batch, methods=["GET"]),
        Route("/v1/batches/{batch_id}/cancel", batch_routes.cancel_batch, methods=["POST"]),
        Route("/v1/models", service_routes.list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", service_routes.retrieve_model, methods=["GET"]),
        Route("/health", service_routes.health, methods=["GET"]),
        Route("/health/ready", service_routes.readiness, methods=["GET"]),
        Route("/metrics", service_routes.metrics, methods=["GET"]),
        Route("/openapi.json", service_routes.openapi, methods=["GET"]),
        *proto_routes(bindings),
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(MetricsMiddleware, metrics=metrics)],
        exception_handlers={ApiError: _api_error, HTTPException: _http_error},
    )


async def _api_error(request: Request, error: ApiError) -> Response:
    return JSONResponse(error.openai_body(), status_code=error.status)


async def _http_error(request: Request, error: HTTPException) -> Response:
    message = f"{request.method} {request.url.path}: {error.detail}"
    return JSONResponse(ApiError(error.status_code, message).openai_body(), status_code=error.status_code,
                        headers=error.headers)
