"""Python client of arbi-serve: generated gRPC stubs (`arbi_client.arbi.v1`), a blocking client
(`ArbiClient`) and an asyncio one (`AsyncArbiClient`) with typed arguments and results, and readiness
helpers over the standard health service.

Needs only grpcio, protobuf, grpcio-health-checking and googleapis-common-protos, never torch.
"""

from arbi_client.aio import AsyncArbiClient
from arbi_client.client import ArbiClient
from arbi_client.readiness import grpc_target, is_serving, wait_until_serving

__version__ = "0.1.0"
__all__ = ["ArbiClient", "AsyncArbiClient", "grpc_target", "is_serving", "wait_until_serving"]
