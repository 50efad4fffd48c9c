"""The tenant of the call being served, set by the auth interceptor from the caller's API key.

With an API keys file, a request's prefix-cache namespace is its key's tenant: an explicit
`scheduling.tenant_id` (the gateway's `user`) that differs is overridden, never trusted. Calls authenticated
otherwise (no keys file, the admin or generate token, the batch runner's in-process credential) keep the
request's own field. The tenant travels in a context variable set by the wrapped handler, so it reaches every
task the handler starts.
"""

from __future__ import annotations

import inspect
from contextvars import ContextVar

import grpc

_CALLER_TENANT: ContextVar[str | None] = ContextVar("arbi_caller_tenant", default=None)


def caller_tenant() -> str | None:
    """The tenant of the current call's API key; None when the call was not made with one."""
    return _CALLER_TENANT.get()


def request_tenant(requested: str) -> str:
    """The tenant a request runs as: its key's, else the `requested` field."""
    tenant = _CALLER_TENANT.get()
    return requested if tenant is None else tenant


def as_tenant(handler: grpc.RpcMethodHandler, tenant: str) -> grpc.RpcMethodHandler:
    """`handler` running with `tenant` as the caller's tenant."""
    kind = ("stream" if handler.request_streaming else "unary") + "_" + (
        "stream" if handler.response_streaming else "unary")
    behavior = getattr(handler, kind)
    if inspect.isasyncgenfunction(behavior):
        async def wrapped(request_or_iterator, context):
            _CALLER_TENANT.set(tenant)  # each RPC runs in a task of its own: no reset needed
            async for response in behavior(request_or_iterator, context):
                yield response
    else:
        async def wrapped(request_or_iterator, context):
            _CALLER_TENANT.set(tenant)
            return await behavior(request_or_iterator, context)
    factory = getattr(grpc, f"{kind}_rpc_method_handler")
    return factory(wrapped, request_deserializer=handler.request_deserializer,
                   response_serializer=handler.response_serializer)
