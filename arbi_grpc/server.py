"""The gRPC server: GenerateService, AdminService, AudioService, EmbeddingService, FileService and BatchService
behind the auth interceptor, plus the standard health service and reflection (v1 and v1alpha), with the
transport limits of a ServerConfig.

`GrpcServer` runs a grpc.aio server on its own event loop thread, so the CLI, tests and benchmarks start
and stop it the same way. Health follows readiness: NOT_SERVING (overall and for GenerateService) while no
model is resident and during a drain, SERVING when a request for the default model can be admitted. Every RPC is counted by the
metrics interceptor; `GET /metrics` is served on a port of its own unless `metrics_port` is 0.
"""

from __future__ import annotations

import asyncio
import threading

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from arbi_client.arbi.v1 import admin_service_pb2, admin_service_pb2_grpc, audio_service_pb2, audio_service_pb2_grpc
from arbi_client.arbi.v1 import batch_service_pb2, embedding_service_pb2, embedding_service_pb2_grpc, file_service_pb2
from arbi_client.arbi.v1 import generate_service_pb2, generate_service_pb2_grpc
from arbi_grpc.audio.memory import estimated_audio_component
from arbi_grpc.audio.metrics import AudioMetrics
from arbi_grpc.audio.models import process_audio_models
from arbi_grpc.auth.credentials import Credentials, load_credentials
from arbi_grpc.auth.interceptor import AuthInterceptor
from arbi_grpc.batches.data_services import DataServices
from arbi_grpc.config import EngineConfig
from arbi_grpc.embeddings.metrics import register_embedding_metrics
from arbi_grpc.embeddings.resident import ResidentEmbeddingModels
from arbi_grpc.memory.budget import MemoryBudget, MemoryComponent
from arbi_grpc.model_host import ModelHost, ModelLoader
from arbi_grpc.models.model_cache import default_cache_root
from arbi_grpc.observability.exporter import MetricsExporter
from arbi_grpc.observability.metrics import ServerMetrics
from arbi_grpc.observability.rpc_interceptor import RpcMetricsInterceptor
from arbi_grpc.observability.settings import ObservabilityConfig
from arbi_grpc.reflection import enable_reflection
from arbi_grpc.served_model import ServedModel, build_served_model, estimated_model_component
from arbi_grpc.server_config import ServerConfig
from arbi_grpc.servicers.admin import AdminServicer
from arbi_grpc.servicers.audio import AudioServicer
from arbi_grpc.servicers.embedding import EmbeddingServicer
from arbi_grpc.servicers.generate import GenerateServicer

GENERATE_SERVICE = generate_service_pb2.DESCRIPTOR.services_by_name["GenerateService"].full_name
ADMIN_SERVICE = admin_service_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name
AUDIO_SERVICE = audio_service_pb2.DESCRIPTOR.services_by_name["AudioService"].full_name
EMBEDDING_SERVICE = embedding_service_pb2.DESCRIPTOR.services_by_name["EmbeddingService"].full_name
FILE_SERVICE = file_service_pb2.DESCRIPTOR.services_by_name["FileService"].full_name
BATCH_SERVICE = batch_service_pb2.DESCRIPTOR.services_by_name["BatchService"].full_name
_SERVICE_NAMES = (GENERATE_SERVICE, ADMIN_SERVICE, EMBEDDING_SERVICE, FILE_SERVICE, BATCH_SERVICE, health.SERVICE_NAME)


class GrpcServer:
    """A server bound to `address` (host:port; port 0 picks a free one).

    `model` is a loaded model, or the EngineConfig to load models with (`load_models` or `load_model` after
    `start`; the server answers health checks, NOT_SERVING, while the first loads).
    """

    def __init__(self, model: ServedModel | EngineConfig, address: str = "127.0.0.1:0",
                 config: ServerConfig | None = None, loader: ModelLoader = build_served_model,
                 observability: ObservabilityConfig | None = None) -> None:
        engine_config = model.config if isinstance(model, ServedModel) else model
        self.config = (config or ServerConfig()).with_stream_limit_for(
            engine_config.max_running_requests_bound, engine_config.max_waiting_requests
        )
        # In-process servers (tests, benchmarks, applications embedding one) open no metrics endpoint unless
        # given one; `arbi-serve serve` passes the flags' config, whose default port is on.
        self.observability = observability or ObservabilityConfig(metrics_port=0)
        self.metrics = ServerMetrics(lambda: [(m.name, m.metrics) for m in self.host.models()])
        self.metrics_exporter: MetricsExporter | None = None  # serving GET /metrics when metrics_port is set
        self.credentials: Credentials = load_credentials(self.config, default_cache_root().parent)
        self._health = health.aio.HealthServicer()
        # The audio models are reserved before the models load, so a CPU engine leaves them room.
        audio_memory = estimated_audio_component() if self.config.audio and loader is build_served_model else None
        self._host_components = (audio_memory,) if audio_memory is not None else ()
        served = model if isinstance(model, ServedModel) else None
        load_wait_s = self.config.model_load_wait_ms / 1000
        self.embeddings = ResidentEmbeddingModels(engine_config.device, load_wait_s, self._check_embedding_fits)
        self.host = ModelHost(engine_config, loader, served, self._publish_readiness, self._host_components,
                              self.embeddings.components, load_wait_s)
        register_embedding_metrics(self.metrics.registry, self.embeddings)
        self._embedding_loads: list[asyncio.Task] = []
        self._address = address
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="arbi-grpc", daemon=True)
        self._server: grpc.aio.Server | None = None
        self.data = DataServices(self.config)  # FileService and BatchService under config.data_dir
        self.port = 0

    @property
    def served(self) -> ServedModel | None:
        """The resident model."""
        return self.host.served

    @property
    def target(self) -> str:
        host = self._address.rsplit(":", 1)[0]
        return f"{host}:{self.port}"

    def start(self) -> GrpcServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result()
        return self

    def load_model(self, spec: str) -> ServedModel:
        """Loads a chat model (blocking); readiness turns SERVING when the first is resident."""
        return asyncio.run_coroutine_threadsafe(self.host.load(spec), self._loop).result()

    def load_models(self, configs: list[EngineConfig]) -> list[ServedModel]:
        """Loads the chat models of `configs` in order (blocking; the first is the default model), the default
        KV pools splitting what is free equally among them (`memory/kv_pool_default.py`)."""
        limit = self.host.memory_limit()  # read before anything of theirs is allocated
        estimates = [estimated_model_component(config, limit, self._host_components) for config in configs[1:]]
        return [asyncio.run_coroutine_threadsafe(self.host.load(config, tuple(estimates[index:])),
                                                 self._loop).result()
                for index, config in enumerate(configs)]

    def _check_embedding_fits(self, name: str, component: MemoryComponent) -> None:
        """Checks an embedding model's estimate against the server's budget with every model resident."""
        device = self.host.config.device
        host = self._host_components if device == "cpu" else ()
        MemoryBudget(device, "estimated", (*self.host.resident_components(), *host, component),
                     self.host.memory_limit(), subject=f"embedding model {name!r}").check_fits()

    def wait_for_embedding_models(self) -> None:
        """Blocks until the configured embedding models are resident; raises the first load's error."""
        async def all_loaded() -> None:
            await asyncio.gather(*self._embedding_loads)

        asyncio.run_coroutine_threadsafe(all_loaded(), self._loop).result()

    async def _load_embedding_models(self) -> None:
        """Starts loading the configured embedding models; EmbeddingService turns SERVING when all are in."""
        loads = [asyncio.ensure_future(self.embeddings.load(spec)) for spec in self.config.embedding_model_specs]
        self._embedding_loads = loads

        async def publish() -> None:
            await asyncio.gather(*loads, return_exceptions=True)
            ready = bool(self.embeddings.names) and all(not t.exception() for t in loads)
            serving = health_pb2.HealthCheckResponse
            await self._health.set(EMBEDDING_SERVICE, serving.SERVING if ready else serving.NOT_SERVING)

        await self._health.set(EMBEDDING_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
        asyncio.ensure_future(publish())

    async def _start(self) -> None:
        server = grpc.aio.server(
            interceptors=[  # the metrics interceptor first, so it also counts what auth rejects
                RpcMetricsInterceptor(self.metrics.rpc_requests),
                AuthInterceptor(self.credentials, ADMIN_SERVICE, GENERATE_SERVICE, AUDIO_SERVICE, EMBEDDING_SERVICE,
                                FILE_SERVICE, BATCH_SERVICE),
            ],
            options=self.config.grpc_options(),
        )
        generate_service_pb2_grpc.add_GenerateServiceServicer_to_server(
            GenerateServicer(self.host, self.config.max_session_generations, self.embeddings), server
        )
        embedding_service_pb2_grpc.add_EmbeddingServiceServicer_to_server(
            EmbeddingServicer(self.embeddings, self.host), server)
        admin_service_pb2_grpc.add_AdminServiceServicer_to_server(
            AdminServicer(self.host, self.config, self.credentials.generate_guarded, self.embeddings), server
        )
        if self.config.audio:
            audio_service_pb2_grpc.add_AudioServiceServicer_to_server(
                AudioServicer(self.host, process_audio_models(),
                              AudioMetrics(self.metrics.registry, process_audio_models())), server
            )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        enable_reflection((*_SERVICE_NAMES, AUDIO_SERVICE) if self.config.audio else _SERVICE_NAMES, server)
        if self.config.audio and self.config.audio_preload:
            await process_audio_models().loaded()
        tls = self.config.server_credentials()
        self.port = (server.add_secure_port(self._address, tls) if tls is not None
                     else server.add_insecure_port(self._address))
        if self.port == 0:
            raise OSError(f"cannot bind gRPC server to {self._address}")
        await self._health.set(ADMIN_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        await self._load_embedding_models()
        for served in self.host.models():
            self.host.watch_engine(served.engine)
        self.data.register(server, self.credentials.internal_token)
        await self._publish_readiness(self.host.readiness()[0])
        if self.observability.metrics_port:
            self.metrics_exporter = MetricsExporter(
                self.metrics.registry, self.observability.metrics_host, self.observability.metrics_port
            )
        await server.start()
        self._server = server
        self.data.resume()

    async def _publish_readiness(self, ready: bool) -> None:
        serving = health_pb2.HealthCheckResponse
        status = serving.SERVING if ready else serving.NOT_SERVING
        for name in ("", GENERATE_SERVICE):
            await self._health.set(name, status)
        self.data.set_serving(ready)

    def wait(self) -> None:
        """Blocks until the server stops."""
        asyncio.run_coroutine_threadsafe(self._server.wait_for_termination(), self._loop).result()

    def drain_and_stop(self, drain_timeout_s: float) -> int:
        """A graceful shutdown: readiness and health turn NOT_SERVING, new generate requests are refused with
        UNAVAILABLE (reason DRAINING), requests in flight get `drain_timeout_s` to finish and write their last
        message; then the server stops (what remains ends with UNAVAILABLE). Returns how many were ended."""
        remaining = asyncio.run_coroutine_threadsafe(self._drain(drain_timeout_s), self._loop).result()
        self.stop()
        return remaining

    async def _drain(self, drain_timeout_s: float) -> int:
        remaining = await self.host.drain(drain_timeout_s)
        await self._health.set(ADMIN_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
        return remaining

    def stop(self, grace_s: float = 2.0) -> None:
        if self.metrics_exporter is not None:
            self.metrics_exporter.stop()
            self.metrics_exporter = None
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(grace_s), self._loop).result()
            self._server = None
        asyncio.run_coroutine_threadsafe(self.data.close(), self._loop).result()
        asyncio.run_coroutine_threadsafe(self.host.shutdown(), self._loop).result()
        asyncio.run_coroutine_threadsafe(self.embeddings.shutdown(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
