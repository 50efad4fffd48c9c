"""AdminService: server info, liveness and readiness, models (list, load, unload, switch, each chat model by
name), memory, the TKV
calibration reload, running requests, runtime settings, drain and resume. Credentials are checked before any
of this runs (`auth/interceptor.py`); the state changes themselves live in `ModelHost`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

import grpc
from arbi_client.arbi.v1 import admin_service_pb2 as pb
from arbi_client.arbi.v1 import admin_service_pb2_grpc as pb_grpc

from arbi_grpc import __version__
from arbi_grpc.auth.model_roots import check_model_spec, model_roots
from arbi_grpc.config import SchedulingLimits
from arbi_grpc.embeddings.resident import ResidentEmbeddingModels, is_embedding_spec
from arbi_grpc.errors import ArbiError, InvalidArgumentError, NotFoundError
from arbi_grpc.model_host import FailedPreconditionError, ModelHost
from arbi_grpc.model_specs import parse_model_spec
from arbi_grpc.models.model_cache import list_cached_models
from arbi_grpc.server_config import ServerConfig
from arbi_grpc.servicers import admin_conversion as convert
from arbi_grpc.servicers.admin_kv_reload import reload_kv_calibration
from arbi_grpc.servicers.status import abort_with, abort_with_status, build_status

log = logging.getLogger(__name__)

BACKEND = "torch"


class AdminServicer(pb_grpc.AdminServiceServicer):
    def __init__(self, host: ModelHost, config: ServerConfig, generate_token_required: bool,
                 embeddings: ResidentEmbeddingModels | None = None) -> None:
        self._host = host
        self._embeddings = embeddings or ResidentEmbeddingModels()
        self._config = config
        self._model_roots = model_roots(config.model_roots)
        self._generate_token_required = generate_token_required

    async def GetServerInfo(self, request, context) -> pb.GetServerInfoResponse:
        served, engine_config = self._host.served, self._host.config
        return pb.GetServerInfoResponse(
            version=__version__,
            model=convert.model_info(served) if served is not None else None,
            backend=BACKEND,
            device=engine_config.device,
            dtype=engine_config.dtype,
            kv_codec=convert.kv_codec(served),
            limits=convert.server_limits(
                self._config, self._host.runtime_settings(), self._generate_token_required
            ),
        )

    async def CheckLiveness(self, request, context) -> pb.CheckLivenessResponse:
        return pb.CheckLivenessResponse(uptime_ms=int((time.monotonic() - self._host.started_at) * 1000))

    async def CheckReadiness(self, request, context) -> pb.CheckReadinessResponse:
        ready, reason = self._host.readiness()
        return pb.CheckReadinessResponse(ready=ready, reason=reason)

    async def ListModels(self, request, context) -> pb.ListModelsResponse:
        cached = await asyncio.to_thread(list_cached_models)
        return pb.ListModelsResponse(models=convert.available_models(self._host.models(), cached))

    async def LoadModel(self, request, context) -> pb.LoadModelResponse:
        try:
            self._check_spec(request.model)
            if is_embedding_spec(request.model):
                embedding_model = await _model_operation(self._embeddings.load(request.model))
                return pb.LoadModelResponse(model=convert.embedding_model_info(embedding_model))
            served = await _model_operation(self._host.load(request.model))
        except ArbiError as error:
            await abort_with(context, error)
        return pb.LoadModelResponse(model=convert.model_info(served))

    async def UnloadModel(self, request, context) -> pb.UnloadModelResponse:
        try:
            if request.model and request.model in self._embeddings.names:
                await self._embeddings.unload(request.model)
                return pb.UnloadModelResponse(model=request.model)
            name, ended = await self._host.unload(request.model, self._drain_timeout_s(request.drain_timeout_ms))
        except ArbiError as error:
            await abort_with(context, error)
        return pb.UnloadModelResponse(model=name, ended_request_count=ended)

    async def SwitchModel(self, request, context) -> pb.SwitchModelResponse:
        try:
            timeout_s = self._drain_timeout_s(request.drain_timeout_ms)
            self._check_spec(request.model)
            served, previous, ended = await _model_operation(
                self._host.switch(request.model, timeout_s, request.replace_model))
        except ArbiError as error:
            await abort_with(context, error)
        return pb.SwitchModelResponse(
            model=convert.model_info(served), previous_model=previous, ended_request_count=ended
        )

    async def GetMemoryReport(self, request, context) -> pb.GetMemoryReportResponse:
        try:
            if self._host.served is None:
                raise FailedPreconditionError("no model is resident")
            served = self._host.resident(request.model)
        except ArbiError as error:
            await abort_with(context, error)
        models = self._host.models()
        embedding_components = {c.name: c for c in self._embeddings.components()}
        return pb.GetMemoryReportResponse(
            **convert.memory_report_fields(served, served.engine.stats()),
            embedding_models=[convert.embedding_model_memory(m, embedding_components[f"embedding {m.name}"])
                              for m in self._embeddings.models()],
            models=[convert.chat_model_memory(m, m.engine.stats()) for m in models],
            budget_bytes=self._host.budget_bytes(),
            budget_limit_bytes=self._host.memory_limit().num_bytes,
        )

    async def FlushPrefixCache(self, request, context) -> pb.FlushPrefixCacheResponse:
        if self._host.served is None:
            await abort_with(context, FailedPreconditionError("no model is resident"))
        tenant = request.tenant_id if request.HasField("tenant_id") else None
        flushed = 0
        for served in self._host.models():  # every resident model's cache
            flushed += await asyncio.wrap_future(served.engine.flush_prefix_cache(tenant))
        return pb.FlushPrefixCacheResponse(flushed_block_count=flushed)

    async def ReloadKvCalibration(self, request, context) -> pb.ReloadKvCalibrationResponse:
        try:
            timeout_s = self._drain_timeout_s(request.drain_timeout_ms)
            reload = await _model_operation(reload_kv_calibration(self._host, request.model, request.path,
                                                                   request.kv_bits, timeout_s))
        except ArbiError as error:
            await abort_with(context, error)
        log.info("KV calibration of model %r reloaded from %s: %s", reload.model, request.path, reload.kv_codec)
        return pb.ReloadKvCalibrationResponse(kv_codec=reload.kv_codec, cancelled_request_count=reload.num_cancelled,
                                              flushed_block_count=reload.num_flushed_blocks)

    async def ListRunningRequests(self, request, context) -> pb.ListRunningRequestsResponse:
        response = pb.ListRunningRequestsResponse()
        for engine in self._host.engines():
            try:
                snapshots = await asyncio.wrap_future(engine.list_requests())
            except ArbiError:
                continue  # the engine shut down meanwhile: it holds no requests
            response.requests.extend(convert.running_request(s) for s in snapshots)
        return response

    async def CancelRunningRequest(self, request, context) -> pb.CancelRunningRequestResponse:
        if not request.request_id:
            await abort_with(context, InvalidArgumentError("request_id", "name the request to cancel"))
        for engine in self._host.engines():
            if await asyncio.wrap_future(engine.cancel(request.request_id)):
                return pb.CancelRunningRequestResponse()
        await abort_with(context, NotFoundError(
            f"no request {request.request_id!r} is in the engine (it may have just finished)"))

    async def GetRuntimeConfig(self, request, context) -> pb.GetRuntimeConfigResponse:
        return pb.GetRuntimeConfigResponse(config=convert.runtime_config(self._host.runtime_settings()))

    async def UpdateRuntimeConfig(self, request, context) -> pb.UpdateRuntimeConfigResponse:
        paths = list(request.update_mask.paths)
        if not paths:
            await abort_with(context, InvalidArgumentError(
                "update_mask", f"name the fields to change, among {', '.join(SchedulingLimits.names())}"))
        values = {path: getattr(request.config, path, 0) for path in paths}
        problems = SchedulingLimits.check(values)
        if problems:
            known = SchedulingLimits.names()
            violations = [(f"config.{name}" if name in known else "update_mask.paths", description)
                          for name, description in problems]
            message = "; ".join(f"{field}: {description}" for field, description in violations)
            await abort_with_status(context, build_status(
                grpc.StatusCode.INVALID_ARGUMENT, message, "INVALID_FIELD", violations))
        updated = dataclasses.replace(self._host.runtime_settings(), **values)
        try:
            await self._host.update_runtime_settings(updated)
        except ArbiError as error:
            await abort_with(context, error)
        log.info("runtime settings updated: %s", values)
        return pb.UpdateRuntimeConfigResponse(config=convert.runtime_config(updated))

    async def DrainServer(self, request, context) -> pb.DrainServerResponse:
        if request.timeout_ms < 0:
            await abort_with(context, InvalidArgumentError("timeout_ms", "must be >= 0"))
        remaining = await self._host.drain(request.timeout_ms / 1000)
        return pb.DrainServerResponse(remaining_request_count=remaining)

    async def ResumeServer(self, request, context) -> pb.ResumeServerResponse:
        await self._host.resume()
        return pb.ResumeServerResponse()

    def _check_spec(self, model: str) -> None:
        """The model roots' check of what `model` (SPEC or NAME=SPEC) loads."""
        check_model_spec(parse_model_spec(model).spec if model.strip() else model, self._model_roots)

    def _drain_timeout_s(self, drain_timeout_ms: int) -> float:
        if drain_timeout_ms < 0:
            raise InvalidArgumentError("drain_timeout_ms", "must be >= 0 (0 uses the server's setting)")
        return (drain_timeout_ms or self._config.drain_timeout_ms) / 1000


async def _model_operation(operation):
    """Awaits a load or switch, turning unexpected failures into an INTERNAL ArbiError."""
    try:
        return await operation
    except ArbiError:
        raise
    except Exception as error:  # reported to the admin, never a server crash
        log.exception("model operation failed")
        raise ArbiError(f"loading the model failed: {type(error).__name__}: {error}") from error
