"""The JSON routes of the protos' `google.api.http` annotations, transcoded as Envoy's gRPC-JSON transcoder
does: proto3 JSON mapping (lowerCamelCase names, int64 as strings, enums by name), path variables and
query parameters set request fields, a streamed response is newline-delimited JSON (one message per
line), a streamed request body is a JSON array of messages, and a failed call answers with its
`google.rpc.Status` as JSON under the HTTP status of its code.

A stream that fails after its first message ends with one more line, `{"error": <Status>}`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.rpc import code_pb2, status_pb2
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from arbi_gateway.errors import http_status_of, status_json, status_of_rpc_error
from arbi_gateway.http_rules import HttpBinding
from arbi_gateway.stream_response import StreamResponse
from arbi_gateway.upstream import RpcKind, forwarded_metadata

NDJSON = "application/x-ndjson"


class _BadRequest(Exception):
    """The HTTP request does not encode a valid request message."""


def proto_routes(bindings: list[HttpBinding]) -> list[Route]:
    return [Route(binding.path, _endpoint(binding), methods=[binding.http_method],
                  name=f"{binding.method.full_name}#{binding.http_method} {binding.template}")
            for binding in bindings]


def _endpoint(binding: HttpBinding) -> Callable[[Request], Awaitable[Response]]:
    request_class = message_factory.GetMessageClass(binding.method.input_type)
    response_class = message_factory.GetMessageClass(binding.method.output_type)

    async def endpoint(request: Request) -> Response:
        try:
            messages = await _request_messages(request, binding, request_class)
        except _BadRequest as error:
            return _status_response(status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=str(error)))
        upstream = request.app.state.gateway.upstream
        call = upstream.method(binding.rpc_path, binding.kind, request_class.SerializeToString,
                               response_class.FromString)
        metadata = forwarded_metadata(request.headers)
        argument = messages[0] if binding.kind in (RpcKind.UNARY_UNARY, RpcKind.UNARY_STREAM) else iter(messages)
        if binding.kind in (RpcKind.UNARY_UNARY, RpcKind.STREAM_UNARY):
            try:
                return JSONResponse(_json(await call(argument, metadata=metadata)))
            except grpc.RpcError as error:
                return _status_response(status_of_rpc_error(error))
        stream = call(argument, metadata=metadata)
        try:
            first = await stream.read()
        except grpc.RpcError as error:
            return _status_response(status_of_rpc_error(error))
        return StreamResponse(_lines(stream, first), NDJSON)

    return endpoint


async def _lines(stream: Any, first: Any) -> AsyncIterator[bytes]:
    try:
        message = first
        while message is not grpc.aio.EOF:
            yield _encode(_json(message))
            message = await stream.read()
    except grpc.RpcError as error:
        yield _encode({"error": status_json(status_of_rpc_error(error))})
    finally:
        stream.cancel()


async def _request_messages(request: Request, binding: HttpBinding, request_class: type[Message]) -> list[Message]:
    """The request message(s) an HTTP request encodes (several for a streaming request)."""
    raw = await request.body()
    if binding.body and raw.strip():
        try:
            payload = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise _BadRequest(f"the body is not valid JSON: {error}") from None
    else:
        payload = None
    if binding.method.client_streaming:
        if payload is None:
            payload = []
        if not isinstance(payload, list):
            raise _BadRequest("a streaming request's body must be a JSON array of messages")
        items = payload
    else:
        items = [payload]
    messages = []
    for item in items:
        message = request_class()
        if item is not None:
            target = message if binding.body == "*" else getattr(message, binding.body)
            try:
                json_format.ParseDict(item, target)
            except (json_format.ParseError, TypeError, ValueError) as error:
                raise _BadRequest(f"the body does not encode {target.DESCRIPTOR.full_name}: {error}") from None
        for parameter, field_path in binding.variables:
            _set_field(message, field_path, [request.path_params[parameter]])
        if binding.body != "*":
            for name in request.query_params:
                _set_field(message, name, request.query_params.getlist(name))
        messages.append(message)
    return messages


def _set_field(message: Message, field_path: str, values: list[str]) -> None:
    """Sets the scalar field at `field_path` (proto or JSON names, dotted) from text values."""
    target = message
    names = field_path.split(".")
    for depth, name in enumerate(names):
        field = _field(target.DESCRIPTOR, name)
        if field is None:
            raise _BadRequest(f"{target.DESCRIPTOR.full_name} has no field {name!r} (from {field_path!r})")
        if depth < len(names) - 1:
            if field.type != FieldDescriptor.TYPE_MESSAGE or field.is_repeated:
                raise _BadRequest(f"{field_path!r}: {name!r} is not a singular message field")
            target = getattr(target, field.name)
            continue
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            raise _BadRequest(f"{field_path!r} is a message field; send it in the body")
        parsed = [_scalar(field, value, field_path) for value in values]
        try:
            if field.is_repeated:
                getattr(target, field.name).extend(parsed)
            else:
                setattr(target, field.name, parsed[-1])
        except ValueError as error:  # an integer out of the field's range
            raise _BadRequest(f"{field_path!r}: {error}") from None


def _field(descriptor: Descriptor, name: str) -> FieldDescriptor | None:
    return descriptor.fields_by_name.get(name) or next(
        (field for field in descriptor.fields if field.json_name == name), None)


def _scalar(field: FieldDescriptor, text: str, field_path: str) -> Any:
    try:
        if field.type == FieldDescriptor.TYPE_BOOL:
            if text not in ("true", "false"):
                raise ValueError("expected true or false")
            return text == "true"
        if field.type == FieldDescriptor.TYPE_STRING:
            return text
        if field.type == FieldDescriptor.TYPE_BYTES:
            return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        if field.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
            return float(text)
        if field.type == FieldDescriptor.TYPE_ENUM:
            value = field.enum_type.values_by_name.get(text)
            return value.number if value is not None else int(text)
        return int(text)
    except ValueError as error:
        raise _BadRequest(f"{field_path!r}: cannot read {text!r} as {field.name}'s type: {error}") from None


def _json(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message)


def _encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode() + b"\n"


def _status_response(status: status_pb2.Status) -> Response:
    return JSONResponse(status_json(status), status_code=http_status_of(status))
