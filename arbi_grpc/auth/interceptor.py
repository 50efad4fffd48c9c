"""The server interceptor that enforces bearer credentials per service.

AdminService always needs the admin token (or an API key marked admin); GenerateService and the other
generate services need the generate token, an API key or the admin token when either of the first two is
configured; health and reflection stay open so probes and grpcurl's discovery work. A call without a
credential, or with one the server does not know, fails with UNAUTHENTICATED; a known credential without the
needed role (the generate token or a key without admin on AdminService) fails with PERMISSION_DENIED. A call
made with an API key runs as its key's tenant (`caller.as_tenant`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

from arbi_grpc.auth.caller import as_tenant
from arbi_grpc.auth.credentials import Credentials, Role
from arbi_grpc.servicers.status import abort_with_status, build_status

_BEARER = "bearer "


def bearer_token(metadata: tuple[tuple[str, str | bytes], ...] | None) -> str | None:
    """The token of an `authorization: Bearer <token>` entry, if any."""
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str) and value[:len(_BEARER)].lower() == _BEARER:
            return value[len(_BEARER):].strip()
    return None


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Checks the bearer token of every call to a protected service before its handler runs."""

    def __init__(self, credentials: Credentials, admin_service: str, *generate_services: str) -> None:
        self._credentials = credentials
        self._required: dict[str, Role] = {admin_service: Role.ADMIN}
        if credentials.generate_guarded:
            self._required.update((service, Role.GENERATE) for service in generate_services)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        service = handler_call_details.method.lstrip("/").split("/", 1)[0]
        required = self._required.get(service)
        handler = await continuation(handler_call_details)
        if required is None or handler is None:
            return handler
        token = bearer_token(handler_call_details.invocation_metadata)
        caller = None if token is None else self._credentials.caller_of(token)
        if caller is None:
            return _refusal(handler, grpc.StatusCode.UNAUTHENTICATED,
                            "MISSING_CREDENTIAL" if token is None else "INVALID_CREDENTIAL",
                            f"{service} needs the metadata 'authorization: Bearer <token>'"
                            + ("" if token is None else "; the token presented is not valid"))
        if required is Role.ADMIN and caller.role is not Role.ADMIN:
            return _refusal(handler, grpc.StatusCode.PERMISSION_DENIED, "ADMIN_CREDENTIAL_REQUIRED",
                            f"{service} needs the admin token or an admin API key; the credential presented "
                            "does not grant it")
        return handler if caller.tenant is None else as_tenant(handler, caller.tenant)


def _refusal(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, reason: str,
             message: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape as `handler` that ends the call with `code`."""
    status = build_status(code, message, reason)

    # A coroutine suits every shape: grpc.aio lets streaming handlers write through the context.
    async def refuse(request_or_iterator: object, context: grpc.aio.ServicerContext) -> None:
        await abort_with_status(context, status)

    codecs = {"request_deserializer": handler.request_deserializer,
              "response_serializer": handler.response_serializer}
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse, **codecs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse, **codecs)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse, **codecs)
    return grpc.unary_unary_rpc_method_handler(refuse, **codecs)
