"""/v1/embeddings and /v1/rerank through the gateway with the official `openai` SDK: every input shape
(string, strings, token ids, token-id lists), float and base64 encodings, dimensions, usage; rerank's
shape; and 4xx answers naming the parameter for empty or over-long input and unknown models.

The server holds only all-MiniLM-L6-v2 (no generate model is loaded), so the module boots in seconds.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
from arbi_gateway.process import GatewayProcess

from arbi_grpc.config import EngineConfig
from arbi_grpc.embeddings.resident import MINILM_NAME
from arbi_grpc.server import GrpcServer
from arbi_grpc.server_config import ServerConfig
from tests.e2e.embedding_reference import cosines, reference_embeddings, reference_model

TEXTS = ["The weather is lovely today.", "It is sunny outside.", "He drove to the stadium."]


@pytest.fixture(scope="module")
def gateway(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    server = GrpcServer(EngineConfig(model=str(smollm2_dir)),
                        config=ServerConfig(embedding_models=MINILM_NAME, audio=False)).start()
    server.wait_for_embedding_models()
    process = GatewayProcess.spawn(["--upstream", server.target, "--http-port", "0"],
                                   tmp_path_factory.mktemp("gateway-embeddings") / "gateway.log")
    yield process
    process.stop()
    server.stop()


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0) as sdk:
        yield sdk


def _ids(text: str) -> list[int]:
    return reference_model().tokenizer(text)["input_ids"]


@pytest.mark.parametrize("shape", ["string", "strings", "token-ids", "token-id-lists"])
@pytest.mark.parametrize("encoding", ["float", "base64", None])
def test_every_input_shape_embeds_as_sentence_transformers(client, shape, encoding) -> None:
    texts = TEXTS[:1] if shape in ("string", "token-ids") else TEXTS
    value = {"string": TEXTS[0], "strings": TEXTS, "token-ids": _ids(TEXTS[0]),
             "token-id-lists": [_ids(t) for t in TEXTS]}[shape]
    extra = {} if encoding is None else {"encoding_format": encoding}
    response = client.embeddings.create(model=MINILM_NAME, input=value, **extra)
    assert response.model == MINILM_NAME
    assert [d.index for d in response.data] == list(range(len(texts)))
    if encoding == "base64":  # the SDK hands base64 back undecoded when asked for it explicitly
        vectors = np.array([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4")
                            for d in response.data])
    else:
        vectors = np.array([d.embedding for d in response.data])
    assert cosines(vectors, reference_embeddings(texts)).min() > 1 - 1e-4
    assert response.usage.prompt_tokens == response.usage.total_tokens == sum(len(_ids(t)) for t in texts)


def test_dimensions_truncate_and_renormalize(client) -> None:
    vector = np.array(client.embeddings.create(model=MINILM_NAME, input=TEXTS[0], dimensions=32,
                                               encoding_format="float").data[0].embedding)
    full = reference_embeddings(TEXTS[:1])[0]
    assert vector.shape == (32,)
    np.testing.assert_allclose(vector, full[:32] / np.linalg.norm(full[:32]), atol=1e-5)


def _post(gateway: GatewayProcess, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(gateway.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_rerank_ranks_by_cosine_and_says_so(gateway: GatewayProcess) -> None:
    documents = ["A sunny day with clear skies.", "Stock prices dropped.", {"text": "It is warm and bright out."}]
    status, body = _post(gateway, "/v1/rerank", {"model": MINILM_NAME, "query": "How is the weather?",
                                                 "documents": documents, "top_n": 2})
    assert status == 200, body
    assert body["model"] == f"{MINILM_NAME}:cosine"
    assert [r["index"] for r in body["results"]] != [] and len(body["results"]) == 2
    assert 1 not in {r["index"] for r in body["results"]}
    assert body["results"][0]["relevance_score"] >= body["results"][1]["relevance_score"]
    assert body["results"][0]["document"]["text"] in ("A sunny day with clear skies.", "It is warm and bright out.")
    assert body["usage"]["total_tokens"] > 0


@pytest.mark.parametrize("body, status, param", [
    ({"model": MINILM_NAME, "input": []}, 400, "input"),
    ({"model": MINILM_NAME, "input": ["ok", ""]}, 400, "input"),
    ({"model": MINILM_NAME, "input": "word " * 300}, 400, "input"),
    ({"model": MINILM_NAME, "input": "x", "dimensions": 999}, 400, "dimensions"),
    ({"model": MINILM_NAME, "input": "x", "encoding_format": "int8"}, 400, "encoding_format"),
    ({"model": "no-such-model", "input": "x"}, 404, None),
], ids=["empty-list", "empty-string", "over-context", "dimensions", "encoding", "unknown-model"])
def test_bad_embedding_requests(gateway: GatewayProcess, body, status, param) -> None:
    answered, error = _post(gateway, "/v1/embeddings", body)
    assert answered == status, error
    assert error["error"]["param"] == param
    assert _post(gateway, "/v1/embeddings", {"model": MINILM_NAME, "input": "still fine"})[0] == 200


def test_openapi_documents_the_routes(gateway: GatewayProcess) -> None:
    with urllib.request.urlopen(gateway.url + "/openapi.json", timeout=30) as answer:
        paths = json.loads(answer.read())["paths"]
    assert paths["/v1/embeddings"]["post"]["operationId"] == "createEmbedding"
    assert paths["/v1/rerank"]["post"]["operationId"] == "rerank"
    assert "/v1/embeddings:embed" in paths
