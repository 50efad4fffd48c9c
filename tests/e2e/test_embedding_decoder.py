"""SmolLM2, the session's chat model, serving embeddings itself (no embedding model resident): its vectors equal
transformers' AutoModel final hidden states (after the final norm; test reference only), last-token pooled and
normalized by default, mean-pooled when the model's setting says so; token ids embed as their text; concurrent
embedding calls beside chats equal their solo runs; the official `openai` SDK through the gateway; and bad input
(an empty list, an input over the context) refused precisely, the engine holding no request and every KV block
free afterwards.

Tolerance: float32 on the CPU, the normalized vectors within 1e-4 of the reference in every value and at a cosine
above 1 - 1e-5 (measured: about 1e-6 and 1 - 1e-7).
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import openai
import pytest
import torch
from grpc_status import rpc_status

from arbi_client.arbi.v1 import embedding_service_pb2 as pb
from arbi_client.arbi.v1 import embedding_service_pb2_grpc as pb_grpc
from arbi_client.arbi.v1 import embedding_types_pb2 as types_pb
from arbi_client.arbi.v1 import generation_types_pb2 as generation_pb
from arbi_grpc.embeddings.decoder_embedder import DecoderEmbedder
from arbi_grpc.embeddings.pooling import PoolingConfig, PoolingMode
from tests.conftest import wait_for_idle_pool
from tests.e2e.embedding_reference import cosines
from tests.e2e.helpers import chat_request, generate, stub_for

TEXTS = ["The weather is lovely today.", "It is sunny outside.", "He drove to the stadium.", "x"]


@pytest.fixture(scope="module")
def reference(smollm2_dir: Path):
    """transformers' SmolLM2 without its LM head, float32 on the CPU."""
    from transformers import AutoModel

    return AutoModel.from_pretrained(smollm2_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def embedder(served_smollm2) -> Iterator[pb_grpc.EmbeddingServiceStub]:
    channel = grpc.insecure_channel(served_smollm2.target)
    yield pb_grpc.EmbeddingServiceStub(channel)
    channel.close()
    wait_for_idle_pool(served_smollm2.served.engine)


def _hidden_states(reference, token_lists: list[list[int]]) -> list[np.ndarray]:
    with torch.no_grad():
        return [reference(torch.tensor([ids])).last_hidden_state[0].numpy() for ids in token_lists]


def _texts(*texts: str) -> list[types_pb.EmbeddingInput]:
    return [types_pb.EmbeddingInput(text=t) for t in texts]


def _vectors(response: pb.EmbedResponse) -> np.ndarray:
    return np.array([list(e.values) for e in response.embeddings])


def _assert_close(ours: np.ndarray, expected: np.ndarray) -> None:
    assert np.abs(ours - expected).max() < 1e-4
    assert cosines(ours, expected).min() > 1 - 1e-5


def _token_lists(served, texts: list[str]) -> list[list[int]]:
    return [served.inputs.tokenizer.encode(text, add_special_tokens=True) for text in texts]


def test_vectors_are_the_last_tokens_final_hidden_states_normalized(served_smollm2, embedder, reference) -> None:
    served = served_smollm2.served
    response = embedder.Embed(pb.EmbedRequest(inputs=_texts(*TEXTS)))  # no embedding model: the default chat model
    token_lists = _token_lists(served, TEXTS)
    last = np.array([states[-1] for states in _hidden_states(reference, token_lists)])
    _assert_close(_vectors(response), last / np.linalg.norm(last, axis=-1, keepdims=True))
    assert (response.model, response.usage.prompt_tokens) == (served.name, sum(map(len, token_lists)))
    raw = embedder.Embed(pb.EmbedRequest(model=served.name, inputs=_texts(*TEXTS), normalize=False))
    assert np.abs(_vectors(raw) - last).max() < 1e-3 * np.abs(last).max()


def test_mean_pooling_averages_the_final_hidden_states(served_smollm2, reference) -> None:
    served = served_smollm2.served
    mean = dataclasses.replace(served.embedder.model, pooling=PoolingConfig(PoolingMode.MEAN, False, None))
    token_lists = _token_lists(served, TEXTS)
    vectors = DecoderEmbedder(mean, served.engine, max_forward_tokens=16).submit(token_lists).result(timeout=60)
    expected = np.array([states.mean(axis=0) for states in _hidden_states(reference, token_lists)])
    assert np.abs(vectors.numpy() - expected).max() < 1e-3 * np.abs(expected).max()
    assert cosines(vectors.numpy(), expected).min() > 1 - 1e-5


def test_token_ids_embed_as_their_text(served_smollm2, embedder) -> None:
    ids = _token_lists(served_smollm2.served, TEXTS[:1])[0]
    token_ids = types_pb.EmbeddingInput(token_ids=generation_pb.TokenIds(ids=ids))
    by_ids = embedder.Embed(pb.EmbedRequest(inputs=[token_ids]))
    _assert_close(_vectors(by_ids), _vectors(embedder.Embed(pb.EmbedRequest(inputs=_texts(TEXTS[0])))))


def test_concurrent_embeddings_beside_chats_equal_their_solo_runs(served_smollm2, embedder) -> None:
    questions = ["Name a fruit.", "Say hi.", "Count to three.", "Name a colour."]
    sentences = [f"Sentence {i} is about {topic}." for i, topic in enumerate(["cats", "stocks", "rain", "music"] * 2)]
    channel, stub = stub_for(served_smollm2.target)
    with channel:
        solo_chats = [generate(stub, chat_request(q, max_output_tokens=8)).token_ids for q in questions]
        solo = np.array([_vectors(embedder.Embed(pb.EmbedRequest(inputs=_texts(s))))[0] for s in sentences])
        with ThreadPoolExecutor(max_workers=12) as pool:
            chats = [pool.submit(generate, stub, chat_request(q, max_output_tokens=8)) for q in questions]
            embeds = [pool.submit(embedder.Embed, pb.EmbedRequest(inputs=_texts(s))) for s in sentences]
            together = np.array([_vectors(future.result())[0] for future in embeds])
            assert [future.result().token_ids for future in chats] == solo_chats
    _assert_close(together, solo)
    wait_for_idle_pool(served_smollm2.served.engine)


def test_bad_input_is_refused_precisely_and_nothing_is_held(served_smollm2, embedder) -> None:
    served = served_smollm2.served
    too_long = generation_pb.TokenIds(ids=[1] * (served.max_model_len + 1))
    cases = [
        (pb.EmbedRequest(model=served.name), "inputs: must hold at least one input"),
        (pb.EmbedRequest(inputs=[types_pb.EmbeddingInput(token_ids=too_long)]),
         f"inputs[0]: has {served.max_model_len + 1} tokens, more than the model's context of {served.max_model_len}"),
        (pb.EmbedRequest(inputs=_texts("fine", "")), "inputs[1]: must not be an empty string"),
        (pb.EmbedRequest(inputs=_texts("x"), dimensions=577), "dimensions: must be in [1, 576]"),
    ]
    for request, message in cases:
        with pytest.raises(grpc.RpcError) as raised:
            embedder.Embed(request)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in rpc_status.from_call(raised.value).message
    with pytest.raises(grpc.RpcError) as raised:
        embedder.Embed(pb.EmbedRequest(model="no-such-model", inputs=_texts("x")))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    wait_for_idle_pool(served.engine)
    assert served.engine.num_requests == 0
    assert len(embedder.Embed(pb.EmbedRequest(inputs=_texts("still answering"))).embeddings) == 1


def test_the_openai_sdk_embeds_through_the_gateway(client: openai.OpenAI, model: str, embedder,
                                                   served_smollm2) -> None:
    expected = _vectors(embedder.Embed(pb.EmbedRequest(model=model, inputs=_texts(*TEXTS))))
    result = client.embeddings.create(model=model, input=TEXTS)  # the SDK asks for base64
    _assert_close(np.array([item.embedding for item in result.data]), expected)
    assert result.model == model and result.usage.prompt_tokens > 0
    ids = _token_lists(served_smollm2.served, TEXTS)
    by_ids = client.embeddings.create(model=model, input=ids, encoding_format="float")
    _assert_close(np.array([item.embedding for item in by_ids.data]), expected)
    short = client.embeddings.create(model=model, input=TEXTS[0], dimensions=64, encoding_format="base64")
    vector = np.array(short.data[0].embedding)
    if isinstance(short.data[0].embedding, str):
        vector = np.frombuffer(base64.b64decode(short.data[0].embedding), dtype="<f4")
    _assert_close(vector[None], expected[:1, :64] / np.linalg.norm(expected[:1, :64]))
    with pytest.raises(openai.BadRequestError) as empty:
        client.embeddings.create(model=model, input=[])
    assert empty.value.status_code == 400
    with pytest.raises(openai.BadRequestError) as too_long:
        client.embeddings.create(model=model, input=[[1] * (served_smollm2.served.max_model_len + 1)])
    assert too_long.value.body["param"] == "input" and "more than the model's context" in too_long.value.message
