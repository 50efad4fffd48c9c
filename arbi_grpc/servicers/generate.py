"""GenerateService: validates a request, hands it to the engine and streams its outputs back.

The engine thread delivers outputs through a sink that forwards them into this RPC's event loop. When
the client cancels or its deadline passes, the handler is cancelled and tells the engine to stop the
request, which frees its KV blocks at the next step.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import grpc

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as pb_grpc
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.input_processor import InputProcessor
from arbi_grpc.engine.request import RequestOutput
from arbi_grpc.errors import ArbiError, NotFoundError
from arbi_grpc.servicers.generate_conversion import (
    prompt_from_proto,
    response_from_output,
    sampling_from_proto,
    stopping_from_proto,
)
from arbi_grpc.servicers.status import abort_with


class GenerateServicer(pb_grpc.GenerateServiceServicer):
    def __init__(self, engine: Engine, inputs: InputProcessor, model_name: str,
                 default_max_output_tokens: int) -> None:
        self._engine = engine
        self._inputs = inputs
        self._model_name = model_name
        self._default_max_output_tokens = default_max_output_tokens

    async def Generate(  # noqa: N802 (gRPC method name)
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateResponse]:
        request_id = uuid.uuid4().hex
        try:
            if request.model and request.model != self._model_name:
                raise NotFoundError(
                    f"model {request.model!r} is not served here; the resident model is "
                    f"{self._model_name!r}"
                )
            generation = self._inputs.build(
                request_id,
                prompt_from_proto(request),
                sampling_from_proto(request),
                stopping_from_proto(request, self._default_max_output_tokens),
            )
        except ArbiError as error:
            await abort_with(context, error)
            return
        loop = asyncio.get_running_loop()
        outputs: asyncio.Queue[RequestOutput] = asyncio.Queue()

        def deliver(output: RequestOutput) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(outputs.put_nowait, output)

        try:
            self._engine.submit(generation, deliver)
        except ArbiError as error:
            await abort_with(context, error)
            return
        await context.send_initial_metadata((("x-request-id", request_id),))
        finished = False
        try:
            while not finished:
                output = await outputs.get()
                finished = output.finished
                if output.error is not None:
                    await abort_with(context, output.error)
                yield response_from_output(output, generation.prompt_token_ids)
        finally:
            if not finished:
                self._engine.cancel(request_id)
