"""The gateway's own routes: GET /v1/models (and /v1/models/{model}), /health (the gateway process is
up), /health/ready (the upstream admits generate requests), /metrics and /openapi.json.

The resident model's name comes from AdminService.GetServerInfo, called with the admin token of the
configured `admin_token_file` when there is one, else with the caller's Authorization header.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from arbi_client.arbi.v1 import admin_service_pb2 as admin_pb
from arbi_gateway.errors import ApiError, api_error_of, status_of_rpc_error
from arbi_gateway.gateway_state import GatewayState
from arbi_gateway.upstream import RpcKind, forwarded_metadata

_GET_SERVER_INFO = "/arbi.v1.AdminService/GetServerInfo"
_GENERATE_SERVICE = "arbi.v1.GenerateService"
_READINESS_TIMEOUT_S = 2.0


async def list_models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": await _resident_models(request)})


async def retrieve_model(request: Request) -> Response:
    name = request.path_params["model"]
    for model in await _resident_models(request):
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
    return Response(gateway.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")


async def openapi(request: Request) -> Response:
    return JSONResponse(request.app.state.gateway.openapi)


async def _resident_models(request: Request) -> list[dict[str, Any]]:
    gateway: GatewayState = request.app.state.gateway
    token_file = gateway.config.admin_token_file
    if token_file:
        try:
            token = Path(token_file).expanduser().read_text().strip()
        except OSError as error:
            raise ApiError(500, f"the gateway cannot read its admin_token_file: {error}") from None
        metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),)
    else:
        metadata = forwarded_metadata(request.headers)
    call = gateway.upstream.method(_GET_SERVER_INFO, RpcKind.UNARY_UNARY,
                                   admin_pb.GetServerInfoRequest.SerializeToString,
                                   admin_pb.GetServerInfoResponse.FromString)
    try:
        info = await call(admin_pb.GetServerInfoRequest(), metadata=metadata)
    except grpc.RpcError as error:
        raise api_error_of(status_of_rpc_error(error), {}) from None
    if not info.HasField("model"):
        return []
    return [{"id": info.model.name, "object": "model", "created": 0, "owned_by": "arbi-serve",
             "max_model_len": info.model.max_context_tokens}]
