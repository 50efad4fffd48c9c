"""The gRPC server: GenerateService plus the standard health and reflection services.

`GrpcServer` runs a grpc.aio server on its own event loop thread, so the CLI, tests and benchmarks start
and stop it the same way.
"""

from __future__ import annotations

import asyncio
import threading

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from arbi_client.arbi.v1 import generate_service_pb2, generate_service_pb2_grpc
from arbi_grpc.serving import ServedModel
from arbi_grpc.servicers.generate import GenerateServicer

_SERVICE_NAMES = (
    generate_service_pb2.DESCRIPTOR.services_by_name["GenerateService"].full_name,
    health.SERVICE_NAME,
    reflection.SERVICE_NAME,
)


class GrpcServer:
    """A running server bound to `address` (host:port; port 0 picks a free one)."""

    def __init__(self, served: ServedModel, address: str = "127.0.0.1:0") -> None:
        self.served = served
        self._address = address
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="arbi-grpc", daemon=True)
        self._server: grpc.aio.Server | None = None
        self.port = 0

    def start(self) -> GrpcServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result()
        return self

    async def _start(self) -> None:
        served = self.served
        server = grpc.aio.server()
        generate_service_pb2_grpc.add_GenerateServiceServicer_to_server(
            GenerateServicer(
                served.engine, served.inputs, served.name, served.config.default_max_output_tokens
            ),
            server,
        )
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection(_SERVICE_NAMES, server)
        self.port = server.add_insecure_port(self._address)
        if self.port == 0:
            raise OSError(f"cannot bind gRPC server to {self._address}")
        await server.start()
        for name in ("", *_SERVICE_NAMES[:1]):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._server = server

    @property
    def target(self) -> str:
        host = self._address.rsplit(":", 1)[0]
        return f"{host}:{self.port}"

    def wait(self) -> None:
        """Blocks until the server stops."""
        asyncio.run_coroutine_threadsafe(self._server.wait_for_termination(), self._loop).result()

    def stop(self, grace_s: float = 2.0) -> None:
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(grace_s), self._loop).result()
            self._server = None
        self.served.engine.shutdown()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
