"""EmbeddingService: Embed and Rerank over the resident embedding models' batching runners, and over the chat
models' own embedders (`embeddings/decoder_embedder.py`).

A request goes to the embedding model its `model` names (empty: the first embedding model), else to the chat model
it names (empty, with no embedding model: the default chat model), waiting for either while it loads. Inputs are
validated on the event loop before anything is queued (empty lists, empty texts, token ids
outside the vocabulary, inputs over the model's context: INVALID_ARGUMENT naming `inputs[i]`); the pooled
vectors come back from the runner's thread. Rerank embeds the query with the documents in one request
and scores each document by cosine similarity.
"""

from __future__ import annotations

import asyncio

import grpc

from arbi_client.arbi.v1 import embedding_service_pb2 as pb
from arbi_client.arbi.v1 import embedding_service_pb2_grpc as pb_grpc
from arbi_client.arbi.v1 import embedding_types_pb2 as types_pb
from arbi_client.arbi.v1 import generation_types_pb2 as generation_pb
from arbi_grpc.embeddings.decoder_embedder import DecoderEmbedder
from arbi_grpc.embeddings.embedding_model import EmbeddingInput
from arbi_grpc.embeddings.encoder_runner import EncoderRunner
from arbi_grpc.embeddings.pooling import cosine_scores, finish_vectors
from arbi_grpc.embeddings.resident import ResidentEmbeddingModels
from arbi_grpc.engine.request import Priority
from arbi_grpc.errors import ArbiError, InvalidArgumentError
from arbi_grpc.model_host import ModelHost
from arbi_grpc.servicers.status import abort_with

RERANK_SCORING = "cosine"
_PRIORITIES = {generation_pb.PRIORITY_UNSPECIFIED: Priority.INTERACTIVE,
               generation_pb.PRIORITY_INTERACTIVE: Priority.INTERACTIVE, generation_pb.PRIORITY_BATCH: Priority.BATCH}


def _inputs(request: pb.EmbedRequest) -> list[EmbeddingInput]:
    converted = []
    for item in request.inputs:
        which = item.WhichOneof("kind")
        if which == "text":
            converted.append(EmbeddingInput(text=item.text))
        elif which == "token_ids":
            converted.append(EmbeddingInput(token_ids=tuple(item.token_ids.ids)))
        else:
            converted.append(EmbeddingInput())
    return converted


class EmbeddingServicer(pb_grpc.EmbeddingServiceServicer):
    def __init__(self, models: ResidentEmbeddingModels, host: ModelHost) -> None:
        self._models = models
        self._host = host

    async def _embedder(self, name: str) -> EncoderRunner | DecoderEmbedder:
        """The runner a request for `name` goes to; NOT_FOUND, UNAVAILABLE or UNIMPLEMENTED (ArbiError)."""
        if self._models.serves(name):
            return await self._models.runner(name)
        await self._host.ready(name)
        return self._host.admit(name).embedder

    async def Embed(self, request: pb.EmbedRequest,  # noqa: N802 (gRPC method name)
                    context: grpc.aio.ServicerContext) -> pb.EmbedResponse:
        try:
            if request.priority not in _PRIORITIES:
                raise InvalidArgumentError("priority", f"unknown priority value {request.priority}")
            runner = await self._embedder(request.model)
            model = runner.model
            dimensions = request.dimensions if request.HasField("dimensions") else None
            if dimensions is not None and not 1 <= dimensions <= model.dimensions:
                raise InvalidArgumentError("dimensions", f"must be in [1, {model.dimensions}], got {dimensions}")
            token_lists = model.token_lists(_inputs(request))
            vectors = await asyncio.wrap_future(runner.submit(token_lists, _PRIORITIES[request.priority]))
        except ArbiError as error:
            await abort_with(context, error)
        normalize = request.normalize if request.HasField("normalize") else model.pooling.normalize
        vectors = finish_vectors(vectors, dimensions, normalize)
        return pb.EmbedResponse(
            model=model.name,
            embeddings=[types_pb.Embedding(index=i, values=row.tolist()) for i, row in enumerate(vectors)],
            usage=types_pb.EmbeddingUsage(prompt_tokens=sum(map(len, token_lists))),
        )

    async def Rerank(self, request: pb.RerankRequest,  # noqa: N802 (gRPC method name)
                     context: grpc.aio.ServicerContext) -> pb.RerankResponse:
        try:
            if not request.query:
                raise InvalidArgumentError("query", "must not be empty")
            if not request.documents:
                raise InvalidArgumentError("documents", "must hold at least one document")
            if request.top_n < 0:
                raise InvalidArgumentError("top_n", f"must be >= 0, got {request.top_n}")
            runner = await self._embedder(request.model)
            model = runner.model
            token_lists = model.token_lists([EmbeddingInput(text=d) for d in request.documents], field="documents")
            query_ids = model.token_lists([EmbeddingInput(text=request.query)], field="query")
            vectors = await asyncio.wrap_future(runner.submit(query_ids + token_lists))
        except ArbiError as error:
            await abort_with(context, error)
        scores = cosine_scores(vectors[0], vectors[1:]).tolist()
        ranked = sorted(range(len(scores)), key=lambda i: -scores[i])[:request.top_n or None]
        return pb.RerankResponse(
            model=model.name, scoring=RERANK_SCORING,
            results=[types_pb.RerankResult(index=i, relevance_score=scores[i],
                                           document=request.documents[i] if request.return_documents else "")
                     for i in ranked],
            usage=types_pb.EmbeddingUsage(prompt_tokens=sum(map(len, query_ids + token_lists))),
        )
