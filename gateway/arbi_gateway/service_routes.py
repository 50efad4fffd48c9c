"""The gateway's own routes: GET /v1/models (and /v1/models/{model}), /health (the gateway process is
up), /health/ready (the upstream admits generate requests), /metrics and /openapi.json.

The served models come from GenerateService.ListServedModels, called with the caller's Authorization header
like every generate call (so any key works when the server sets no generate token). GET /metrics carries
the gateway's families and, when configured, the upstream server's (`upstream_metrics`).
"""

from __future__ import annotations

from typing import Any

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_gateway.errors import ApiError, api_error_of, status_of_rpc_error
from arbi_gateway.gateway_state import GatewayState
from arbi_gateway.upstream import RpcKind, forwarded_metadata
from arbi_gateway.upstream_metrics import merged_exposition

_LIST_SERVED_MODELS = "/arbi.v1.GenerateService/ListServedModels"
_GENERATE_SERVICE = "arbi.v1.GenerateService"
_READINESS_TIMEOUT_S = 2.0


async def list_models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": await _served_models(request)})


async def retrieve_model(request: Request) -> Response:
    name = request.path_params["model"]
    for model in await _served_models(request):
        if model["id"] == name:
            return JSONResponse(model)
    raise ApiError(404, f"The model '{name}' is not served here.", "model", "model_not_found")


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok", "upstream": request.app.state.gateway.upstream.target})


async def readiness(request: Request) -> Response:
    gateway: GatewayState = request.app.state.gateway
    if await gateway.upstream.is_serving(_GENERATE_SERVICE, _READINESS_TIMEOUT_S):
        return JSONResponse({"status": "ready", "upstream": gateway.upstream.target})
    return JSONResponse({"status": "not ready", "upstream": gateway.upstream.target}, status_code=503)


async def metrics(request: Request) -> Response:
    gateway: GatewayState = request.app.state.gateway
    upstream = await gateway.upstream_metrics.scrape() if gateway.upstream_metrics else None
    gateway.metrics.upstream_metrics_up.set(upstream is not None)
    own = gateway.metrics.exposition()
    body = merged_exposition(own, upstream) if upstream is not None else own
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


async def openapi(request: Request) -> Response:
    return JSONResponse(request.app.state.gateway.openapi)


async def _served_models(request: Request) -> list[dict[str, Any]]:
    gateway: GatewayState = request.app.state.gateway
    call = gateway.upstream.method(_LIST_SERVED_MODELS, RpcKind.UNARY_UNARY,
                                   pb.ListServedModelsRequest.SerializeToString,
                                   pb.ListServedModelsResponse.FromString)
    try:
        served = await call(pb.ListServedModelsRequest(), metadata=forwarded_metadata(request.headers))
    except grpc.RpcError as error:
        raise api_error_of(status_of_rpc_error(error), {}) from None
    return [{"id": model.name, "object": "model", "created": 0, "owned_by": "arbi-serve",
             "max_model_len": model.max_context_tokens} for model in served.models]
