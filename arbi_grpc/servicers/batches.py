"""BatchService: create, get, list (paged) and cancel batches, over the BatchRunner and BatchStore; a caller
with an API key sees only its tenant's batches."""

from __future__ import annotations

import grpc
from arbi_client.arbi.v1 import batch_service_pb2 as pb
from arbi_client.arbi.v1 import batch_service_pb2_grpc as pb_grpc
from arbi_client.arbi.v1 import file_types_pb2 as types_pb

from arbi_grpc.auth.caller import caller_tenant
from arbi_grpc.batches.batch_runner import BatchRunner
from arbi_grpc.batches.batch_store import BatchRecord, BatchStore
from arbi_grpc.errors import ArbiError, InvalidArgumentError
from arbi_grpc.servicers.status import abort_with

DEFAULT_PAGE, MAX_PAGE = 20, 100
_TIMES = ("created_at", "expires_at", "in_progress_at", "finalizing_at", "completed_at", "failed_at",
          "cancelling_at", "cancelled_at", "expired_at")


def batch_proto(record: BatchRecord) -> types_pb.Batch:
    return types_pb.Batch(
        id=record.id, endpoint=record.endpoint, input_file_id=record.input_file_id,
        completion_window=record.completion_window, status=record.status, output_file_id=record.output_file_id,
        error_file_id=record.error_file_id, failure_message=record.failure_message, metadata=record.metadata,
        request_counts=types_pb.BatchRequestCounts(total=record.total, completed=record.completed,
                                                   failed=record.failed),
        **{name: getattr(record, name) for name in _TIMES})


class BatchServicer(pb_grpc.BatchServiceServicer):
    def __init__(self, store: BatchStore, runner: BatchRunner) -> None:
        self._store = store
        self._runner = runner

    async def CreateBatch(self, request: pb.CreateBatchRequest, context: grpc.aio.ServicerContext) -> pb.CreateBatchResponse:
        try:
            record = self._runner.create(request.input_file_id, request.endpoint, request.completion_window,
                                         dict(request.metadata), caller_tenant())
        except ArbiError as error:
            await abort_with(context, error)
        return pb.CreateBatchResponse(batch=batch_proto(record))

    async def GetBatch(self, request: pb.GetBatchRequest, context: grpc.aio.ServicerContext) -> pb.GetBatchResponse:
        try:
            return pb.GetBatchResponse(batch=batch_proto(self._store.get(request.batch_id, caller_tenant())))
        except ArbiError as error:
            await abort_with(context, error)

    async def ListBatches(self, request: pb.ListBatchesRequest, context: grpc.aio.ServicerContext) -> pb.ListBatchesResponse:
        try:
            limit = request.limit or DEFAULT_PAGE
            if not 1 <= limit <= MAX_PAGE:
                raise InvalidArgumentError("limit", f"must be between 1 and {MAX_PAGE}, got {limit}")
            records, has_more = self._store.page(request.after, limit, caller_tenant())
        except ArbiError as error:
            await abort_with(context, error)
        return pb.ListBatchesResponse(batches=[batch_proto(record) for record in records], has_more=has_more)

    async def CancelBatch(self, request: pb.CancelBatchRequest, context: grpc.aio.ServicerContext) -> pb.CancelBatchResponse:
        try:
            return pb.CancelBatchResponse(batch=batch_proto(self._runner.cancel(request.batch_id, caller_tenant())))
        except ArbiError as error:
            await abort_with(context, error)
