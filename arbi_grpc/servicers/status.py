"""Errors as `google.rpc.Status`: canonical code, message, and ErrorInfo / BadRequest details (AIP-193).

Servicers end an RPC with `abort_with` (the status travels in the standard `grpc-status-details-bin`
trailer, so `grpc_status.rpc_status.from_call` reads it back); a Session sends `status_of(error)` inside
the stream for a failed generation.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from arbi_grpc.errors import (
    ArbiError,
    DrainingError,
    EngineStepError,
    InvalidArgumentError,
    ModelLoadError,
    NotFoundError,
    ResourceExhaustedError,
    UnavailableError,
    UnsupportedArchitectureError,
)

DOMAIN = "arbi-serve"

# ErrorInfo.reason of each error type, a stable constant clients may branch on; other errors use their code.
_REASONS: dict[type[ArbiError], str] = {
    InvalidArgumentError: "INVALID_FIELD",
    NotFoundError: "NOT_FOUND",
    ResourceExhaustedError: "RESOURCE_EXHAUSTED",
    DrainingError: "DRAINING",  # before UnavailableError, its base class: the first match names the reason
    UnavailableError: "UNAVAILABLE",
    UnsupportedArchitectureError: "UNSUPPORTED_ARCHITECTURE",
    ModelLoadError: "MODEL_LOAD_FAILED",
    EngineStepError: "ENGINE_STEP_FAILED",
}


def status_code(error: ArbiError) -> grpc.StatusCode:
    """The canonical gRPC code named by `error.code` (INTERNAL for anything unknown)."""
    return getattr(grpc.StatusCode, error.code, grpc.StatusCode.INTERNAL)


def _packed(message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def build_status(code: grpc.StatusCode, message: str, reason: str,
                 violations: Sequence[tuple[str, str]] = (),
                 metadata: dict[str, str] | None = None) -> status_pb2.Status:
    """A Status with an ErrorInfo, plus a BadRequest when `violations` (field, description) are given."""
    status = status_pb2.Status(code=code.value[0], message=message)
    status.details.append(_packed(error_details_pb2.ErrorInfo(
        reason=reason, domain=DOMAIN, metadata=metadata or {}
    )))
    if violations:
        status.details.append(_packed(error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=field, description=description)
            for field, description in violations
        ])))
    return status


def status_of(error: ArbiError) -> status_pb2.Status:
    """The Status an engine or servicer error maps to."""
    reason = next((r for kind, r in _REASONS.items() if isinstance(error, kind)), error.code)
    if isinstance(error, InvalidArgumentError):
        return build_status(grpc.StatusCode.INVALID_ARGUMENT, str(error), reason,
                            [(error.field, error.description)], {"field": error.field})
    if isinstance(error, UnsupportedArchitectureError):
        return build_status(status_code(error), str(error), reason, metadata={
            "architecture": error.architecture, "supported": ",".join(error.supported)
        })
    return build_status(status_code(error), str(error), reason)


async def abort_with_status(context: grpc.aio.ServicerContext, status: status_pb2.Status) -> None:
    """Ends the RPC with `status` (code, message and details); never returns."""
    converted = rpc_status.to_status(status)
    await context.abort(converted.code, converted.details, converted.trailing_metadata)


async def abort_with(context: grpc.aio.ServicerContext, error: ArbiError) -> None:
    """Ends the RPC with the error's status; never returns."""
    await abort_with_status(context, status_of(error))
