"""GenerateService: admits and validates requests, hands them to the resident model's engine, and streams
outputs back; Session multiplexes many generations (`session.py`); the tokenizer RPCs answer from the
model's tokenizer that `model` names (`tokenization.py`); ListServedModels names every resident
chat model (the default first) and the resident embedding models. Each request goes to the resident model its
`model` field names (empty: the default model).

The engine thread delivers outputs into a bounded `OutputBuffer` read on this RPC's event loop. When the
client cancels or its deadline passes, the handler is cancelled and tells the engine to stop the request,
which frees its KV blocks at the next step.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import grpc

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as pb_grpc
from arbi_grpc.embeddings.resident import ResidentEmbeddingModels
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.input_processor import TextPrompt
from arbi_grpc.engine.request import GenerationRequest
from arbi_grpc.engine.sequence import OutputSink
from arbi_grpc.errors import ArbiError, InvalidArgumentError
from arbi_grpc.model_host import ModelHost
from arbi_grpc.servicers import tokenization
from arbi_grpc.servicers.admin_conversion import embedding_model_info, model_info
from arbi_grpc.servicers.generate_conversion import (
    prompt_from_proto,
    response_from_output,
    sampling_from_proto,
    scheduling_from_proto,
    stopping_from_proto,
)
from arbi_grpc.servicers.output_buffer import OutputBuffer
from arbi_grpc.servicers.session import SessionStream
from arbi_grpc.servicers.status import abort_with
from arbi_grpc.servicers.tool_conversion import (
    ResponseShaper,
    render_chat_with_tools,
    tool_call_constraint,
    tool_call_shaper,
    tool_set_from_proto,
    uses_tools,
)


class GenerateServicer(pb_grpc.GenerateServiceServicer):
    def __init__(self, host: ModelHost, max_session_generations: int,
                 embeddings: ResidentEmbeddingModels | None = None) -> None:
        self._host = host
        self._embeddings = embeddings
        self._max_session_generations = max_session_generations

    def start(self, request: pb.GenerateRequest,
              sink: OutputSink) -> tuple[Engine, GenerationRequest, ResponseShaper]:
        """Admits, validates and submits one generation within one loop turn; raises ArbiError. The shaper
        reads the generation's responses for tool calls (the identity without tools)."""
        served = self._host.admit(request.model)
        prompt, shape = prompt_from_proto(request), lambda response: response
        sampling = sampling_from_proto(request)
        if request.WhichOneof("input") == "chat" and uses_tools(request.chat):
            template = served.inputs.chat_template
            tool_set = tool_set_from_proto(request.chat)
            if tool_set.constrained:
                sampling = replace(sampling, output_constraint=tool_call_constraint(tool_set, sampling))
            prompt = TextPrompt(render_chat_with_tools(template, request.chat, tool_set))
            shape = tool_call_shaper(template, tool_set)
        try:
            generation = served.inputs.build(
                uuid.uuid4().hex,
                prompt,
                sampling,
                stopping_from_proto(request, self._host.config.default_max_output_tokens),
                scheduling_from_proto(request),
            )
        except InvalidArgumentError as error:
            if error.field != "prompt" or not isinstance(prompt, TextPrompt) or not request.HasField("chat"):
                raise
            raise InvalidArgumentError("chat.messages", error.description) from None  # the rendered chat
        served.engine.submit(generation, sink)
        return served.engine, generation, shape

    async def Generate(  # noqa: N802 (gRPC method name)
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateResponse]:
        ready = asyncio.Event()
        buffer = OutputBuffer(asyncio.get_running_loop(), ready.set)
        try:
            await self._host.ready(request.model)
            engine, generation, shape = self.start(request, buffer.sink)
        except ArbiError as error:
            await abort_with(context, error)
            return
        await context.send_initial_metadata((("x-request-id", generation.request_id),))
        finished = False
        try:
            while not finished:
                await ready.wait()
                ready.clear()
                output = buffer.take()
                finished = output.finished
                if output.error is not None:
                    if output.tokens or output.text:
                        yield shape(response_from_output(replace(output, error=None), generation.prompt_token_ids))
                    await abort_with(context, output.error)
                yield shape(response_from_output(output, generation.prompt_token_ids))
        finally:
            if not finished:
                engine.cancel(generation.request_id)

    async def Session(  # noqa: N802 (gRPC method name)
        self, request_iterator: AsyncIterator[pb.SessionRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.SessionResponse]:
        stream = SessionStream(self.start, self._max_session_generations)
        async for response in stream.run(request_iterator, context):
            yield response

    async def Tokenize(  # noqa: N802 (gRPC method name)
        self, request: pb.TokenizeRequest, context: grpc.aio.ServicerContext
    ) -> pb.TokenizeResponse:
        return await self._with_resident_tokenizer(tokenization.tokenize, request, context)

    async def Detokenize(  # noqa: N802 (gRPC method name)
        self, request: pb.DetokenizeRequest, context: grpc.aio.ServicerContext
    ) -> pb.DetokenizeResponse:
        return await self._with_resident_tokenizer(tokenization.detokenize, request, context)

    async def CountTokens(  # noqa: N802 (gRPC method name)
        self, request: pb.CountTokensRequest, context: grpc.aio.ServicerContext
    ) -> pb.CountTokensResponse:
        return await self._with_resident_tokenizer(tokenization.count_tokens, request, context)

    async def ListServedModels(  # noqa: N802 (gRPC method name)
        self, request: pb.ListServedModelsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListServedModelsResponse:
        models = [model_info(served) for served in self._host.models()]
        embedding_models = self._embeddings.models() if self._embeddings is not None else []
        return pb.ListServedModelsResponse(models=models + [embedding_model_info(m) for m in embedding_models])

    async def _with_resident_tokenizer(self, handler, request, context: grpc.aio.ServicerContext):
        """Runs a tokenizer RPC against the model `request.model` names; engine errors become statuses."""
        try:
            await self._host.ready(request.model)
            return handler(self._host.resident(request.model), request)
        except ArbiError as error:
            await abort_with(context, error)
