"""Errors the engine raises, each tied to the canonical gRPC status code it maps to.

This module imports nothing heavy: the servicers translate `ArbiError.code` into a gRPC status, the CLI
prints `str(error)`. Messages name the offending field or file and the accepted values.
"""

from __future__ import annotations


class ArbiError(Exception):
    """Base class: `code` is a canonical gRPC status code name."""

    code = "INTERNAL"


class InvalidArgumentError(ArbiError):
    """A request field (or CLI flag) has a value the engine does not accept."""

    code = "INVALID_ARGUMENT"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.description = message


class UnimplementedError(ArbiError):
    """A request asks for a feature whose path is defined in the API but not wired in this server yet."""

    code = "UNIMPLEMENTED"


class EngineStepError(ArbiError):
    """One engine step failed (a device or model error): only the requests in that step end; the engine goes on."""

    code = "INTERNAL"


class NotFoundError(ArbiError):
    """A named model (or other resource) does not exist."""

    code = "NOT_FOUND"


class ResourceExhaustedError(ArbiError):
    """The server is at a configured limit (waiting queue full, KV pool cannot ever hold the request)."""

    code = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(ArbiError):
    """The server is not in the state an operation needs (no resident model, requests still running, another kind
    of KV storage)."""

    code = "FAILED_PRECONDITION"


class UnsupportedArchitectureError(ArbiError):
    """A model's architecture is outside the explicit supported set."""

    code = "FAILED_PRECONDITION"

    def __init__(self, architecture: str, supported: tuple[str, ...]) -> None:
        super().__init__(
            f"unsupported model architecture {architecture!r}; supported: {', '.join(supported)}"
        )
        self.architecture = architecture
        self.supported = supported


class ModelLoadError(ArbiError):
    """A weights, config or tokenizer file is missing, truncated or corrupt."""

    code = "DATA_LOSS"


class UnavailableError(ArbiError):
    """The server cannot serve right now (shutting down, draining); the client may retry elsewhere."""

    code = "UNAVAILABLE"


class PermissionDeniedError(ArbiError):
    """The caller may not do this (a model path outside the configured model roots)."""

    code = "PERMISSION_DENIED"


class DrainingError(UnavailableError):
    """The server is draining (a shutdown, or an admin drain) and admits no new work; retry on another replica."""


class MissingDependencyError(ArbiError):
    """An optional package that a configured feature needs is not installed or fails to import."""

    code = "FAILED_PRECONDITION"
