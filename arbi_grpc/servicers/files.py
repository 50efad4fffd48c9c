"""FileService: uploads (a client stream, metadata first), listing, metadata, content and deletion of the
files under the data directory; a caller with an API key sees only its tenant's files."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from arbi_client.arbi.v1 import file_service_pb2 as pb
from arbi_client.arbi.v1 import file_service_pb2_grpc as pb_grpc
from arbi_client.arbi.v1 import file_types_pb2 as types_pb

from arbi_grpc.auth.caller import caller_tenant
from arbi_grpc.batches.file_store import FileRecord, FileStore, FileTooLarge, check_upload_purpose
from arbi_grpc.errors import ArbiError, InvalidArgumentError
from arbi_grpc.servicers.status import abort_with

MAX_FILES_PAGE = 10_000  # OpenAI's files.list limit and default


def stored_file_proto(record: FileRecord) -> types_pb.StoredFile:
    return types_pb.StoredFile(id=record.id, filename=record.filename, purpose=record.purpose,
                               bytes=record.bytes, created_at=record.created_at)


class FileServicer(pb_grpc.FileServiceServicer):
    def __init__(self, files: FileStore, max_file_bytes: int) -> None:
        self._files = files
        self._max_file_bytes = max_file_bytes

    async def UploadFile(self, request_iterator: AsyncIterator[pb.UploadFileRequest],
                         context: grpc.aio.ServicerContext) -> pb.UploadFileResponse:
        try:
            metadata: pb.UploadFileMetadata | None = None
            chunks: list[bytes] = []
            size = 0
            async for part in request_iterator:
                kind = part.WhichOneof("part")
                if metadata is None and kind != "metadata":
                    raise InvalidArgumentError("metadata", "the first message of an upload must be its metadata")
                if kind == "metadata":
                    if metadata is not None:
                        raise InvalidArgumentError("metadata", "an upload has one metadata message, the first")
                    metadata = part.metadata
                    check_upload_purpose(metadata.purpose)
                    if not metadata.filename:
                        raise InvalidArgumentError("filename", "must not be empty")
                    continue
                size += len(part.chunk)
                if size > self._max_file_bytes:
                    raise FileTooLarge(f"the file is larger than the limit of {self._max_file_bytes} bytes")
                chunks.append(part.chunk)
            if metadata is None:
                raise InvalidArgumentError("metadata", "the upload sent no metadata")
            if metadata.purpose == "batch":
                try:
                    b"".join(chunks).decode("utf-8")
                except UnicodeDecodeError:
                    raise InvalidArgumentError("file", "a batch input file must be UTF-8 JSONL") from None
            record = await asyncio.to_thread(self._files.create, metadata.filename, metadata.purpose, chunks,
                                           owner=caller_tenant())
        except ArbiError as error:
            await abort_with(context, error)
        return pb.UploadFileResponse(file=stored_file_proto(record))

    async def ListFiles(self, request: pb.ListFilesRequest, context: grpc.aio.ServicerContext) -> pb.ListFilesResponse:
        try:
            limit = request.limit or MAX_FILES_PAGE
            if not 1 <= limit <= MAX_FILES_PAGE:
                raise InvalidArgumentError("limit", f"must be between 1 and {MAX_FILES_PAGE}, got {limit}")
            if request.order not in ("", "asc", "desc"):
                raise InvalidArgumentError("order", f"must be 'asc' or 'desc', got {request.order!r}")
            records, has_more = self._files.page(request.purpose, request.after, limit, request.order == "asc",
                                                 caller_tenant())
        except ArbiError as error:
            await abort_with(context, error)
        return pb.ListFilesResponse(files=[stored_file_proto(record) for record in records], has_more=has_more)

    async def GetFile(self, request: pb.GetFileRequest, context: grpc.aio.ServicerContext) -> pb.GetFileResponse:
        try:
            return pb.GetFileResponse(file=stored_file_proto(self._files.get(request.file_id, caller_tenant())))
        except ArbiError as error:
            await abort_with(context, error)

    async def GetFileContent(self, request: pb.GetFileContentRequest,
                             context: grpc.aio.ServicerContext) -> AsyncIterator[pb.GetFileContentResponse]:
        try:
            chunks = self._files.chunks(request.file_id, caller_tenant())
            first = next(chunks, b"")
        except ArbiError as error:
            await abort_with(context, error)
        yield pb.GetFileContentResponse(chunk=first)
        for chunk in chunks:
            yield pb.GetFileContentResponse(chunk=chunk)

    async def DeleteFile(self, request: pb.DeleteFileRequest, context: grpc.aio.ServicerContext) -> pb.DeleteFileResponse:
        try:
            self._files.delete(request.file_id, caller_tenant())
        except ArbiError as error:
            await abort_with(context, error)
        return pb.DeleteFileResponse(file_id=request.file_id)
