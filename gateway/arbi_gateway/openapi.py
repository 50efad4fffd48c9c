"""The gateway's OpenAPI 3.1 document (GET /openapi.json): the OpenAI routes with the request schemas
the gateway checks against, its own routes, and every annotated proto route with JSON schemas derived
from the message descriptors under the proto3 JSON mapping.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from arbi_gateway import embedding_routes
from arbi_gateway.batch_openapi import files_and_batches_paths
from arbi_gateway.http_rules import HttpBinding
from arbi_gateway.json_schema import Schema

_F = FieldDescriptor
_INTEGER_RANGES = {
    _F.TYPE_INT32: (-(2**31), 2**31 - 1), _F.TYPE_SINT32: (-(2**31), 2**31 - 1),
    _F.TYPE_SFIXED32: (-(2**31), 2**31 - 1), _F.TYPE_UINT32: (0, 2**32 - 1), _F.TYPE_FIXED32: (0, 2**32 - 1),
    _F.TYPE_INT64: (-(2**63), 2**63 - 1), _F.TYPE_SINT64: (-(2**63), 2**63 - 1),
    _F.TYPE_SFIXED64: (-(2**63), 2**63 - 1), _F.TYPE_UINT64: (0, 2**64 - 1), _F.TYPE_FIXED64: (0, 2**64 - 1),
}
# Well-known types with a JSON form of their own.
_WELL_KNOWN: dict[str, Schema] = {
    "google.protobuf.FieldMask": {"type": "string", "description": "Comma-separated lowerCamelCase paths."},
    "google.protobuf.Timestamp": {"type": "string", "description": "RFC 3339 time."},
    "google.protobuf.Duration": {"type": "string", "description": "Seconds with an 's' suffix."},
    "google.protobuf.Any": {"type": "object"},
    "google.protobuf.Struct": {"type": "object"},
    "google.protobuf.Value": {},
}
_ERROR: Schema = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["message", "type"], "properties": {
        "message": {"type": "string"}, "type": {"type": "string"},
        "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]},
    }}}}
_STATUS: Schema = {"type": "object", "properties": {
    "code": {"type": "integer"}, "message": {"type": "string"},
    "details": {"type": "array", "items": {"type": "object"}},
}}


def openapi_document(version: str, chat_schema: Schema, completion_schema: Schema,
                     bindings: list[HttpBinding]) -> dict[str, Any]:
    components: dict[str, Schema] = {
        "Error": _ERROR, "Status": _STATUS,
        "ChatCompletionRequest": chat_schema, "CompletionRequest": completion_schema,
    }
    paths: dict[str, dict[str, Any]] = {
        "/v1/chat/completions": {"post": _openai_operation("createChatCompletion", "ChatCompletionRequest",
                                                           "A chat completion, or its chunks as SSE.")},
        "/v1/completions": {"post": _openai_operation("createCompletion", "CompletionRequest",
                                                      "A completion, or its chunks as SSE.")},
        "/v1/models": {"get": _get("listModels", "The resident model.")},
        "/v1/models/{model}": {"get": {**_get("retrieveModel", "The model, when it is resident."),
                                       "parameters": [_parameter("model", "path", {"type": "string"})]}},
        "/health": {"get": _get("checkGatewayLiveness", "The gateway process is up.")},
        "/health/ready": {"get": {**_get("checkUpstreamReadiness", "The upstream admits generate requests."),
                                  "responses": {"200": _json_response("Ready."),
                                                "503": _json_response("Not ready.")}}},
        "/metrics": {"get": {"operationId": "getGatewayMetrics", "responses": {"200": {
            "description": "Prometheus text exposition.", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
        **files_and_batches_paths(),
    }
    for path, (operation_id, schema_name, schema, description) in embedding_routes.OPENAPI_OPERATIONS.items():
        components[schema_name] = schema
        paths[path] = {"post": _json_operation(operation_id, schema_name, description)}
    for binding in bindings:
        paths.setdefault(binding.path, {})[binding.http_method.lower()] = _proto_operation(binding, components)
    return {"openapi": "3.1.0", "info": {"title": "arbi-serve gateway", "version": version},
            "paths": paths, "components": {"schemas": components}}


def _json_response(description: str, schema: Schema | None = None) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema or {"type": "object"}}}}


def _errors(schema_name: str) -> dict[str, Any]:
    return {"default": _json_response("An error.", {"$ref": f"#/components/schemas/{schema_name}"})}


def _get(operation_id: str, description: str) -> dict[str, Any]:
    return {"operationId": operation_id, "responses": {"200": _json_response(description), **_errors("Error")}}


def _parameter(name: str, location: str, schema: Schema) -> dict[str, Any]:
    return {"name": name, "in": location, "required": location == "path", "schema": schema}


def _openai_operation(operation_id: str, request_schema: str, description: str) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{request_schema}"}}}},
        "responses": {"200": {"description": description, "content": {
            "application/json": {"schema": {"type": "object"}},
            "text/event-stream": {"schema": {"type": "string"}}}}, **_errors("Error")},
    }


def _json_operation(operation_id: str, request_schema: str, description: str) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{request_schema}"}}}},
        "responses": {"200": _json_response(description), **_errors("Error")},
    }


def _proto_operation(binding: HttpBinding, components: dict[str, Schema]) -> dict[str, Any]:
    method = binding.method
    request_type = method.input_type
    parameters = []
    for parameter, field_path in binding.variables:
        parameters.append(_parameter(parameter, "path", _field_schema(_field_at(request_type, field_path),
                                                                      components, scalar_only=True)))
    if binding.body != "*":
        bound = {field_path.split(".")[0] for _, field_path in binding.variables} | {binding.body}
        for field in request_type.fields:
            if field.name not in bound and field.type != _F.TYPE_MESSAGE:
                parameters.append(_parameter(field.json_name, "query", _field_schema(field, components)))
    operation: dict[str, Any] = {
        "operationId": f"{method.containing_service.name}.{method.name}",
        "summary": f"{method.full_name} ({binding.http_method} {binding.template})",
        "parameters": parameters,
    }
    if binding.body:
        body_type = request_type if binding.body == "*" else request_type.fields_by_name[binding.body].message_type
        body_schema = _message_ref(body_type, components)
        if method.client_streaming:
            body_schema = {"type": "array", "items": body_schema}
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": body_schema}}}
    response_schema = _message_ref(method.output_type, components)
    media = "application/x-ndjson" if method.server_streaming else "application/json"
    operation["responses"] = {
        "200": {"description": f"{method.output_type.name}" + (", one per line" if method.server_streaming else ""),
                "content": {media: {"schema": response_schema}}},
        **_errors("Status"),
    }
    return operation


def _field_at(descriptor: Descriptor, field_path: str) -> FieldDescriptor:
    *parents, last = field_path.split(".")
    for name in parents:
        descriptor = descriptor.fields_by_name[name].message_type
    return descriptor.fields_by_name[last]


def _message_ref(descriptor: Descriptor, components: dict[str, Schema]) -> Schema:
    if descriptor.full_name in _WELL_KNOWN:
        return _WELL_KNOWN[descriptor.full_name]
    if descriptor.full_name not in components:
        components[descriptor.full_name] = {}  # placeholder: recursive messages refer to themselves
        components[descriptor.full_name] = {
            "type": "object", "additionalProperties": False,
            "properties": {field.json_name: _field_schema(field, components) for field in descriptor.fields},
        }
    return {"$ref": f"#/components/schemas/{descriptor.full_name}"}


def _field_schema(field: FieldDescriptor, components: dict[str, Schema], scalar_only: bool = False) -> Schema:
    if field.type == _F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
        value = field.message_type.fields_by_name["value"]
        return {"type": "object", "additionalProperties": _single_schema(value, components)}
    single = _single_schema(field, components)
    if field.is_repeated and not scalar_only:
        return {"type": "array", "items": single}
    return single


def _single_schema(field: FieldDescriptor, components: dict[str, Schema]) -> Schema:
    if field.type in _INTEGER_RANGES:
        low, high = _INTEGER_RANGES[field.type]
        return {"type": "integer", "minimum": low, "maximum": high}
    if field.type in (_F.TYPE_FLOAT, _F.TYPE_DOUBLE):
        return {"type": "number"}
    if field.type == _F.TYPE_BOOL:
        return {"type": "boolean"}
    if field.type in (_F.TYPE_STRING, _F.TYPE_BYTES):
        return {"type": "string"}
    if field.type == _F.TYPE_ENUM:
        return {"type": "string", "enum": [value.name for value in field.enum_type.values]}
    return _message_ref(field.message_type, components)
