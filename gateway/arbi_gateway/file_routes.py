"""OpenAI's /v1/files over FileService: multipart upload (streamed to UploadFile in chunks), list (paged:
limit, after, order), retrieve, content and delete. An upload over the server's size limit answers 413."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from arbi_client.arbi.v1 import file_service_pb2 as pb
from arbi_client.arbi.v1 import file_types_pb2 as types_pb
from arbi_gateway.errors import ApiError, api_error_of, invalid, status_of_rpc_error
from arbi_gateway.gateway_state import GatewayState
from arbi_gateway.upstream import RpcKind, forwarded_metadata

_SERVICE = "/arbi.v1.FileService/"
_CHUNK_BYTES = 1 << 20
_MAX_PART_BYTES = 1 << 40  # the server enforces its own limit (413)
_MAX_FILES_PAGE = 10_000
_PARAMS = {"purpose": "purpose", "filename": "file", "file": "file", "file_id": "file_id", "limit": "limit",
           "after": "after", "order": "order"}


def file_json(file: types_pb.StoredFile) -> dict[str, Any]:
    return {"id": file.id, "object": "file", "bytes": file.bytes, "created_at": file.created_at,
            "filename": file.filename, "purpose": file.purpose, "status": "processed", "status_details": None}


def _rpc(gateway: GatewayState, name: str, kind: RpcKind, request_class: Any, response_class: Any) -> Any:
    return gateway.upstream.method(_SERVICE + name, kind, request_class.SerializeToString, response_class.FromString)


def _error(error: grpc.RpcError) -> ApiError:
    api_error = api_error_of(status_of_rpc_error(error), _PARAMS)
    if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
        api_error.status = 413
    return api_error


async def upload_file(request: Request) -> Response:
    gateway: GatewayState = request.app.state.gateway
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise invalid("file", "send the file as multipart/form-data with 'file' and 'purpose' parts")
    async with request.form(max_part_size=_MAX_PART_BYTES) as form:
        upload, purpose = form.get("file"), form.get("purpose")
        if not isinstance(upload, UploadFile):
            raise invalid("file", "the 'file' part is required", "missing_required_parameter")
        if not isinstance(purpose, str) or not purpose:
            raise invalid("purpose", "the 'purpose' part is required", "missing_required_parameter")

        async def parts() -> AsyncIterator[pb.UploadFileRequest]:
            yield pb.UploadFileRequest(metadata=pb.UploadFileMetadata(filename=upload.filename or "upload",
                                                                      purpose=purpose))
            while chunk := await upload.read(_CHUNK_BYTES):
                yield pb.UploadFileRequest(chunk=chunk)

        call = _rpc(gateway, "UploadFile", RpcKind.STREAM_UNARY, pb.UploadFileRequest, pb.UploadFileResponse)
        try:
            response = await call(parts(), metadata=forwarded_metadata(request.headers))
        except grpc.RpcError as error:
            raise _error(error) from None
    return JSONResponse(file_json(response.file))


async def list_files(request: Request) -> Response:
    """OpenAI's files.list: `purpose`, `limit` (1 to 10000), `after` (a file id) and `order` (asc, desc)."""
    gateway: GatewayState = request.app.state.gateway
    query = request.query_params
    limit_text = query.get("limit", "10000")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= _MAX_FILES_PAGE:
        raise invalid("limit", f"'limit' must be an integer between 1 and {_MAX_FILES_PAGE}")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid("order", "'order' must be 'asc' or 'desc'")
    message = pb.ListFilesRequest(purpose=query.get("purpose", ""), after=query.get("after", ""),
                                  limit=int(limit_text), order=order)
    call = _rpc(gateway, "ListFiles", RpcKind.UNARY_UNARY, pb.ListFilesRequest, pb.ListFilesResponse)
    try:
        response = await call(message, metadata=forwarded_metadata(request.headers))
    except grpc.RpcError as error:
        raise _error(error) from None
    data = [file_json(file) for file in response.files]
    return JSONResponse({"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                         "last_id": data[-1]["id"] if data else None, "has_more": response.has_more})


async def retrieve_file(request: Request) -> Response:
    gateway: GatewayState = request.app.state.gateway
    call = _rpc(gateway, "GetFile", RpcKind.UNARY_UNARY, pb.GetFileRequest, pb.GetFileResponse)
    try:
        response = await call(pb.GetFileRequest(file_id=request.path_params["file_id"]),
                              metadata=forwarded_metadata(request.headers))
    except grpc.RpcError as error:
        raise _error(error) from None
    return JSONResponse(file_json(response.file))


async def file_content(request: Request) -> Response:
    gateway: GatewayState = request.app.state.gateway
    call = _rpc(gateway, "GetFileContent", RpcKind.UNARY_STREAM, pb.GetFileContentRequest, pb.GetFileContentResponse)
    stream = call(pb.GetFileContentRequest(file_id=request.path_params["file_id"]),
                  metadata=forwarded_metadata(request.headers))
    try:
        content = b"".join([part.chunk async for part in stream])
    except grpc.RpcError as error:
        raise _error(error) from None
    return Response(content, media_type="application/octet-stream")


async def delete_file(request: Request) -> Response:
    gateway: GatewayState = request.app.state.gateway
    call = _rpc(gateway, "DeleteFile", RpcKind.UNARY_UNARY, pb.DeleteFileRequest, pb.DeleteFileResponse)
    try:
        response = await call(pb.DeleteFileRequest(file_id=request.path_params["file_id"]),
                              metadata=forwarded_metadata(request.headers))
    except grpc.RpcError as error:
        raise _error(error) from None
    return JSONResponse({"id": response.file_id, "object": "file", "deleted": True})
