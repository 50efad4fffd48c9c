"""EmbeddingService over a real server holding SmolLM2 and all-MiniLM-L6-v2 together: vectors equal
sentence-transformers', similar sentences score above dissimilar ones, dimensions and normalization, Rerank,
ListServedModels, precise statuses for bad input (nothing leaked, the next call answers), and 16 concurrent
chats with 16 concurrent embedding calls, the chats equal to their solo runs."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_status import rpc_status

from arbi_client.arbi.v1 import embedding_service_pb2 as pb
from arbi_client.arbi.v1 import embedding_service_pb2_grpc as pb_grpc
from arbi_client.arbi.v1 import embedding_types_pb2 as types_pb
from arbi_client.arbi.v1 import generate_service_pb2 as generate_pb
from arbi_client.arbi.v1 import generation_types_pb2 as generation_pb
from arbi_grpc.config import EngineConfig
from arbi_grpc.embeddings.resident import MINILM_NAME
from arbi_grpc.served_model import build_served_model
from arbi_grpc.server import GrpcServer
from arbi_grpc.server_config import ServerConfig
from tests.conftest import wait_for_idle_pool
from tests.e2e.embedding_reference import SENTENCE_TRIPLES, cosines, reference_embeddings, reference_model
from tests.e2e.helpers import chat_request, generate, stub_for


@pytest.fixture(scope="module")
def server(smollm2_dir: Path) -> Iterator[GrpcServer]:
    config = EngineConfig(model=str(smollm2_dir), kv_cache_memory_mib=128, max_waiting_requests=64)
    server = GrpcServer(build_served_model(config),
                        config=ServerConfig(embedding_models=MINILM_NAME, audio=False)).start()
    server.wait_for_embedding_models()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def embedder(server: GrpcServer) -> Iterator[pb_grpc.EmbeddingServiceStub]:
    channel = grpc.insecure_channel(server.target)
    yield pb_grpc.EmbeddingServiceStub(channel)
    channel.close()
    wait_for_idle_pool(server.served.engine)


def _texts(*texts: str) -> list[types_pb.EmbeddingInput]:
    return [types_pb.EmbeddingInput(text=t) for t in texts]


def _vectors(response: pb.EmbedResponse) -> np.ndarray:
    return np.array([list(e.values) for e in response.embeddings])


def test_embeddings_equal_sentence_transformers(embedder) -> None:
    texts = [text for triple in SENTENCE_TRIPLES for text in triple] + ["hi", "a " * 200]
    response = embedder.Embed(pb.EmbedRequest(model=MINILM_NAME, inputs=_texts(*texts)))
    assert response.model == MINILM_NAME
    assert [e.index for e in response.embeddings] == list(range(len(texts)))
    ours, reference = _vectors(response), reference_embeddings(texts)
    assert ours.shape == reference.shape == (len(texts), 384)
    assert cosines(ours, reference).min() > 1 - 1e-4
    np.testing.assert_allclose(np.linalg.norm(ours, axis=-1), 1.0, atol=1e-5)  # the checkpoint's Normalize
    token_lists = [reference_model().tokenizer(text)["input_ids"] for text in texts]
    assert response.usage.prompt_tokens == sum(map(len, token_lists))


def test_token_id_inputs_embed_as_their_text(embedder) -> None:
    text = "Token ids are used as given."
    ids = reference_model().tokenizer(text)["input_ids"]
    response = embedder.Embed(pb.EmbedRequest(inputs=[
        types_pb.EmbeddingInput(token_ids=generation_pb.TokenIds(ids=ids)), *_texts(text)]))
    by_ids, by_text = _vectors(response)
    assert cosines(by_ids, by_text) > 1 - 1e-6


def test_similar_pairs_score_above_dissimilar_ones(embedder) -> None:
    for anchor, similar, dissimilar in SENTENCE_TRIPLES:
        a, s, d = _vectors(embedder.Embed(pb.EmbedRequest(inputs=_texts(anchor, similar, dissimilar))))
        assert cosines(a, s) > cosines(a, d) + 0.2, (anchor, similar, dissimilar)


def test_dimensions_truncate_then_normalize(embedder) -> None:
    text = "Matryoshka truncation keeps the first values."
    full = _vectors(embedder.Embed(pb.EmbedRequest(inputs=_texts(text), normalize=False)))[0]
    short = _vectors(embedder.Embed(pb.EmbedRequest(inputs=_texts(text), dimensions=64)))[0]
    assert short.shape == (64,)
    np.testing.assert_allclose(short, full[:64] / np.linalg.norm(full[:64]), atol=1e-5)


def test_rerank_orders_documents_by_cosine(embedder) -> None:
    documents = ["Paris is the capital of France.", "Bananas are yellow.", "France's capital city is Paris."]
    response = embedder.Rerank(pb.RerankRequest(query="What is the capital of France?", documents=documents,
                                                top_n=2, return_documents=True))
    assert response.scoring == "cosine"
    assert len(response.results) == 2
    assert {r.index for r in response.results} == {0, 2}
    assert response.results[0].relevance_score >= response.results[1].relevance_score
    assert response.results[0].document == documents[response.results[0].index]
    reference = reference_embeddings(["What is the capital of France?", *documents])
    for result in response.results:
        expected = cosines(reference[0], reference[1 + result.index])
        assert abs(result.relevance_score - expected) < 1e-4


def test_served_models_list_both(server: GrpcServer) -> None:
    channel, stub = stub_for(server.target)
    with channel:
        models = {m.name: m for m in stub.ListServedModels(generate_pb.ListServedModelsRequest()).models}
    assert set(models) == {server.served.name, MINILM_NAME}
    assert models[MINILM_NAME].architecture == "BertModel"
    assert models[MINILM_NAME].max_context_tokens == 256


@pytest.mark.parametrize("request_, code, field", [
    (pb.EmbedRequest(), grpc.StatusCode.INVALID_ARGUMENT, "inputs"),
    (pb.EmbedRequest(inputs=_texts("fine", "")), grpc.StatusCode.INVALID_ARGUMENT, "inputs[1]"),
    (pb.EmbedRequest(inputs=_texts("word " * 300)), grpc.StatusCode.INVALID_ARGUMENT, "inputs[0]"),
    (pb.EmbedRequest(inputs=[types_pb.EmbeddingInput(token_ids=generation_pb.TokenIds(ids=[101, 40000]))]),
     grpc.StatusCode.INVALID_ARGUMENT, "inputs[0]"),
    (pb.EmbedRequest(inputs=_texts("x"), dimensions=385), grpc.StatusCode.INVALID_ARGUMENT, "dimensions"),
    (pb.EmbedRequest(model="no-such-model", inputs=_texts("x")), grpc.StatusCode.NOT_FOUND, None),
], ids=["no-inputs", "empty-text", "over-context", "token-outside-vocab", "dimensions", "unknown-model"])
def test_bad_input_is_refused_precisely(embedder, request_, code, field) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        embedder.Embed(request_)
    assert raised.value.code() == code
    if field is not None:
        status = rpc_status.from_call(raised.value)
        assert f"{field}:" in status.message
    assert len(embedder.Embed(pb.EmbedRequest(inputs=_texts("still answering"))).embeddings) == 1


def test_rerank_bad_input(embedder) -> None:
    for request_ in (pb.RerankRequest(documents=["a"]), pb.RerankRequest(query="q"),
                     pb.RerankRequest(query="q", documents=["a"], top_n=-1)):
        with pytest.raises(grpc.RpcError) as raised:
            embedder.Rerank(request_)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_concurrent_chats_and_embeddings_answer_correctly(server: GrpcServer, embedder) -> None:
    distinct = [f"Name a fruit that starts with the letter {chr(ord('A') + i)}." for i in range(8)]
    questions = distinct * 2  # 16 chats; each distinct question's solo run is its reference
    sentences = [f"Sentence number {i} is about {topic}." for i, topic in
                 enumerate(["cats", "stocks", "rain", "music"] * 4)]
    channel, stub = stub_for(server.target)
    with channel:
        solo = {q: generate(stub, chat_request(q, max_output_tokens=8)).token_ids for q in distinct}
        with ThreadPoolExecutor(max_workers=32) as pool:
            chats = [pool.submit(generate, stub, chat_request(q, max_output_tokens=8)) for q in questions]
            embeds = [pool.submit(embedder.Embed, pb.EmbedRequest(inputs=_texts(s))) for s in sentences]
            together = [future.result().token_ids for future in chats]
            vectors = np.array([_vectors(future.result())[0] for future in embeds])
    assert together == [solo[q] for q in questions]
    assert cosines(vectors, reference_embeddings(sentences)).min() > 1 - 1e-4
    wait_for_idle_pool(server.served.engine)


def test_admin_unloads_and_loads_an_embedding_model_by_name(server: GrpcServer, embedder) -> None:
    from arbi_client.arbi.v1 import admin_service_pb2 as admin_pb
    from arbi_client.arbi.v1 import admin_service_pb2_grpc as admin_grpc

    metadata = (("authorization", f"Bearer {server.credentials.admin_token}"),)
    with grpc.insecure_channel(server.target) as channel:
        admin = admin_grpc.AdminServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            admin.UnloadModel(admin_pb.UnloadModelRequest(model="no-such-model"), metadata=metadata)
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND
        assert admin.UnloadModel(admin_pb.UnloadModelRequest(model=MINILM_NAME), metadata=metadata).model == MINILM_NAME
        with pytest.raises(grpc.RpcError) as raised:
            embedder.Embed(pb.EmbedRequest(model=MINILM_NAME, inputs=_texts("gone")))
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND
        channel_generate, stub = stub_for(server.target)
        with channel_generate:
            assert generate(stub, chat_request("Say hi.", max_output_tokens=4)).token_ids  # the chat model stays
        loaded = admin.LoadModel(admin_pb.LoadModelRequest(model=MINILM_NAME), metadata=metadata).model
        assert (loaded.name, loaded.architecture) == (MINILM_NAME, "BertModel")
    vector = _vectors(embedder.Embed(pb.EmbedRequest(model=MINILM_NAME, inputs=_texts("back again"))))
    assert cosines(vector, reference_embeddings(["back again"])).min() > 1 - 1e-4


def test_memory_report_and_metrics_cover_the_embedding_model(server: GrpcServer) -> None:
    from arbi_client.arbi.v1 import admin_service_pb2 as admin_pb
    from arbi_client.arbi.v1 import admin_service_pb2_grpc as admin_grpc

    model = server.embeddings.models()[0]
    expected = sum(t.numel() * t.element_size() for t in model.encoder.weights.values())
    assert 80 * 2**20 < expected < 100 * 2**20  # 22.7 M fp32 parameters
    metadata = (("authorization", f"Bearer {server.credentials.admin_token}"),)
    with grpc.insecure_channel(server.target) as channel:
        report = admin_grpc.AdminServiceStub(channel).GetMemoryReport(admin_pb.GetMemoryReportRequest(),
                                                                      metadata=metadata)
    assert [(m.name, m.weight_bytes) for m in report.embedding_models] == [(MINILM_NAME, expected)]
    assert report.weight_bytes > 0  # the generate model's own figure is unchanged
    # The budget holds the encoder's weights and its estimated activations beside the chat model's own budget.
    activations = report.embedding_models[0].activation_bytes
    assert activations > 0
    assert report.budget_bytes == server.served.memory_budget.total_bytes + expected + activations
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(server.metrics.exposition().decode())}
    samples = families["arbi_embedding_model_weight_bytes"].samples
    assert [(s.labels, s.value) for s in samples] == [({"model": MINILM_NAME}, expected)]
