"""A minimal gRPC chat client for the CLI: readiness wait and streamed chat. Imports no torch."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as pb_grpc
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb


def grpc_target(url: str) -> str:
    """`grpc://host:port`, `http://host:port` or `host:port` -> `host:port`."""
    for scheme in ("grpc://", "http://"):
        if url.startswith(scheme):
            url = url[len(scheme):]
    return url.rstrip("/")


def is_serving(target: str, timeout_s: float = 1.0) -> bool:
    """True when the standard health service at `target` answers SERVING."""
    with grpc.insecure_channel(target) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=timeout_s
            )
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def wait_until_serving(target: str, timeout_s: float, is_alive=lambda: True) -> bool:
    """Polls readiness until `timeout_s` passes or `is_alive()` turns False."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and is_alive():
        if is_serving(target):
            return True
        time.sleep(0.5)
    return False


@dataclass(frozen=True)
class ChatOptions:
    max_output_tokens: int = 512
    temperature: float = 0.0
    model: str = ""


def stream_chat(target: str, messages: list[dict[str, str]], options: ChatOptions) -> Iterator[str]:
    """Yields the assistant's reply text as it is generated."""
    request = pb.GenerateRequest(
        model=options.model,
        chat=types_pb.ChatInput(
            messages=[types_pb.ChatMessage(role=m["role"], content=m["content"]) for m in messages]
        ),
        sampling=types_pb.SamplingParameters(temperature=options.temperature),
        stopping=types_pb.StoppingCriteria(max_output_tokens=options.max_output_tokens),
    )
    with grpc.insecure_channel(target) as channel:
        for response in pb_grpc.GenerateServiceStub(channel).Generate(request):
            if response.text:
                yield response.text
