"""Maps the engine's errors onto gRPC status codes."""

from __future__ import annotations

import grpc

from arbi_grpc.errors import ArbiError


def status_code(error: ArbiError) -> grpc.StatusCode:
    """The canonical gRPC code named by `error.code` (INTERNAL for anything unknown)."""
    return getattr(grpc.StatusCode, error.code, grpc.StatusCode.INTERNAL)


async def abort_with(context: grpc.aio.ServicerContext, error: ArbiError) -> None:
    """Ends the RPC with the error's status and message; never returns."""
    await context.abort(status_code(error), str(error))
