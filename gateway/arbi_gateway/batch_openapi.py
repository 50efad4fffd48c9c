"""The OpenAPI paths of the OpenAI Files and Batches routes (file_routes, batch_routes)."""

from __future__ import annotations

from typing import Any

from arbi_gateway.json_schema import Schema

_ERROR = {"$ref": "#/components/schemas/Error"}
_PURPOSES = ["batch", "user_data", "assistants", "fine-tune", "vision"]


def _json(description: str, schema: Schema | None = None) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema or {"type": "object"}}}}


def _operation(operation_id: str, description: str, errors: tuple[str, ...], **extra: Any) -> dict[str, Any]:
    responses = {"200": _json(description), **{code: _json("An error.", _ERROR) for code in errors},
                 "default": _json("An error.", _ERROR)}
    return {"operationId": operation_id, "responses": responses, **extra}


def _path(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _query(name: str, schema: Schema) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


_UPLOAD = {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file", "purpose"],
    "properties": {"file": {"type": "string", "format": "binary"}, "purpose": {"type": "string", "enum": _PURPOSES}}}}}}
_CREATE_BATCH = {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["input_file_id", "endpoint"],
    "properties": {"input_file_id": {"type": "string"},
                   "endpoint": {"type": "string", "enum": ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]},
                   "completion_window": {"type": "string", "enum": ["24h"]},
                   "metadata": {"type": ["object", "null"], "additionalProperties": {"type": "string"}}}}}}}


def files_and_batches_paths() -> dict[str, dict[str, Any]]:
    file_id, batch_id = [_path("file_id")], [_path("batch_id")]
    content = {"200": {"description": "The file's bytes.",
                       "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
               "404": _json("An error.", _ERROR), "default": _json("An error.", _ERROR)}
    return {
        "/v1/files": {
            "post": _operation("createFile", "The stored file.", ("400", "413"), requestBody=_UPLOAD),
            "get": _operation("listFiles", "A page of the stored files, newest first unless order is asc.",
                              ("400", "404"), parameters=[
                                  _query("purpose", {"type": "string"}), _query("after", {"type": "string"}),
                                  _query("limit", {"type": "integer", "minimum": 1, "maximum": 10000}),
                                  _query("order", {"type": "string", "enum": ["asc", "desc"]})]),
        },
        "/v1/files/{file_id}": {
            "get": _operation("retrieveFile", "The file's metadata.", ("404",), parameters=file_id),
            "delete": _operation("deleteFile", "The file was deleted.", ("404",), parameters=file_id),
        },
        "/v1/files/{file_id}/content": {"get": {"operationId": "downloadFile", "parameters": file_id,
                                                "responses": content}},
        "/v1/batches": {
            "post": _operation("createBatch", "The batch, in progress.", ("400", "404"), requestBody=_CREATE_BATCH),
            "get": _operation("listBatches", "Batches, newest first.", ("400", "404"), parameters=[
                _query("after", {"type": "string"}), _query("limit", {"type": "integer", "minimum": 1, "maximum": 100})]),
        },
        "/v1/batches/{batch_id}": {"get": _operation("retrieveBatch", "The batch.", ("404",), parameters=batch_id)},
        "/v1/batches/{batch_id}/cancel": {"post": _operation("cancelBatch", "The batch, cancelling.", ("400", "404"),
                                                             parameters=batch_id)},
    }
