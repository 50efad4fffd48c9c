"""Two chat models resident in one server (SmolLM2 under the names `a` and `b`, each with its own engine and KV
pool, loaded as `serve --model a=DIR --model b=DIR` loads them): requests route by `model` and equal their solo
runs, an unknown name is NOT_FOUND listing the resident ones, the memory report and the metrics cover both,
`plan` estimates the pair, the gateway lists and routes both through the openai SDK, one model unloads and reloads
(UNAVAILABLE while it loads, with --model-load-wait-ms 0) while the other keeps serving, and a third model,
loaded or switched in by name, cannot fit and is refused naming itself and the component."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from arbi_client import ArbiClient
from arbi_client.arbi.v1 import generate_service_pb2 as pb
from tests.conftest import wait_for_idle_pool
from tests.e2e.helpers import chat_request, generate, stub_for
from tests.e2e.serve_process import run_cli

QUESTIONS = ("What is the capital of France?", "Name a primary colour.", "Count to five.", "Say hi.")
TOKENS = 8
# Settings of both models. Two SmolLM2 (about 152 MiB each with these settings: int4 weights 92 MiB, 16 MiB of KV
# cache, activations) fit the limit; a third's weights do not.
FLAGS = {"kv_cache_memory_mib": 16, "max_step_tokens": 128, "max_running_requests": 8, "max_waiting_requests": 32}
LIMIT_MIB = 360


@pytest.fixture(scope="module")
def server(smollm2_dir: Path) -> Iterator:
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.model_specs import served_model_configs
    from arbi_grpc.server import GrpcServer
    from arbi_grpc.server_config import ServerConfig

    config = EngineConfig(model=f"a={smollm2_dir},b={smollm2_dir}", memory_limit_mib=LIMIT_MIB, **FLAGS)
    server = GrpcServer(config, config=ServerConfig(audio=False, model_load_wait_ms=0)).start()
    server.load_models(served_model_configs(config))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stub(server) -> Iterator:
    channel, stub = stub_for(server.target)
    yield stub
    channel.close()
    for served in server.host.models():
        wait_for_idle_pool(served.engine)


@pytest.fixture
def admin(server) -> Iterator[ArbiClient]:
    with ArbiClient(server.target, admin_token=server.credentials.admin_token) as client:
        yield client


def _request(question: str, model: str) -> pb.GenerateRequest:
    request = chat_request(question, max_output_tokens=TOKENS)
    request.model = model
    return request


def test_requests_route_by_name_and_equal_their_solo_runs(server, stub) -> None:
    assert [m.name for m in stub.ListServedModels(pb.ListServedModelsRequest()).models] == ["a", "b"]
    engines = {m.name: m.engine for m in server.host.models()}
    assert engines["a"] is not engines["b"] and engines["a"].kv_storage is not engines["b"].kv_storage
    solo = {question: generate(stub, _request(question, "a")).token_ids for question in QUESTIONS}
    assert all(solo.values())
    def output_tokens() -> dict[str, float]:
        return {m.name: m.metrics.registry.get_sample_value("arbi_output_tokens_total") for m in server.host.models()}

    before = output_tokens()
    jobs = [(question, model) for question in QUESTIONS for model in ("a", "b", "")] * 2
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        together = list(pool.map(lambda job: generate(stub, _request(*job)).token_ids, jobs))
    assert together == [solo[question] for question, _ in jobs]  # the same weights under both names
    after = output_tokens()
    on_b = sum(len(tokens) for tokens, (_, model) in zip(together, jobs, strict=True) if model == "b")
    assert after["b"] - before["b"] == on_b  # `b` ran its requests, `a` the rest (empty names the default)
    assert after["a"] - before["a"] == sum(map(len, together)) - on_b
    counted = stub.CountTokens(pb.CountTokensRequest(model="b", prompt="Hello there"))
    assert counted.max_context_tokens == server.host.resident("b").max_model_len


def test_an_unknown_model_is_not_found_naming_the_resident_ones(stub) -> None:
    for call in (lambda: generate(stub, _request("Hi", "c")),
                 lambda: stub.Tokenize(pb.TokenizeRequest(model="c", prompt="Hi"))):
        with pytest.raises(grpc.RpcError) as raised:
            call()
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND
        assert "model 'c' is not served here; the resident models are ['a', 'b']" in raised.value.details()


def test_memory_report_and_metrics_cover_both_models(server, admin: ArbiClient) -> None:
    report = admin.get_memory_report()
    assert [m.name for m in report.models] == ["a", "b"]
    for entry in report.models:
        served = server.host.resident(entry.name)
        assert entry.budget_bytes == served.memory_budget.total_bytes
        assert entry.weight_bytes == served.weight_bytes and entry.kv_cache_bytes > 0
    assert report.budget_bytes == sum(m.budget_bytes for m in report.models)
    assert report.budget_bytes < report.budget_limit_bytes == LIMIT_MIB * 2**20
    assert admin.get_memory_report("b").kv_block_count == report.models[1].kv_block_count
    samples = {(s.name, s.labels.get("model"), s.labels.get("component")): s.value
               for family in text_string_to_metric_families(server.metrics.exposition().decode())
               for s in family.samples}
    for name in ("a", "b"):
        assert samples[("arbi_kv_blocks_free", name, None)] == server.host.resident(name).engine.stats().num_free_blocks
        assert samples[("arbi_memory_budget_bytes", name, "weights")] == server.host.resident(name).weight_bytes


def test_gateway_lists_and_routes_both_models(server, stub, tmp_path_factory: pytest.TempPathFactory) -> None:
    import openai
    from arbi_gateway.process import GatewayProcess

    gateway = GatewayProcess.spawn(["--upstream", server.target, "--http-port", "0"],
                                   tmp_path_factory.mktemp("gateway-multi-model") / "gateway.log")
    try:
        with openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0) as sdk:
            assert [model.id for model in sdk.models.list().data] == ["a", "b"]
            replies = {model: sdk.chat.completions.create(
                model=model, messages=[{"role": "user", "content": QUESTIONS[0]}], max_tokens=TOKENS,
                temperature=0).choices[0].message.content for model in ("a", "b")}
            with pytest.raises(openai.NotFoundError):
                sdk.chat.completions.create(model="nope", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    finally:
        gateway.stop()
    assert replies["a"] == replies["b"] == generate(stub, _request(QUESTIONS[0], "b")).text


def test_plan_estimates_both_models_within_ten_percent(server, smollm2_dir: Path) -> None:
    flags = [part for key, value in FLAGS.items() for part in (f"--{key.replace('_', '-')}", str(value))]
    result = run_cli("plan", "--json", "--no-audio", "--model", f"a={smollm2_dir}", "--model", f"b={smollm2_dir}",
                     "--memory-limit-mib", str(LIMIT_MIB), *flags)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert [model["model"] for model in plan["models"]] == ["a", "b"]
    assert "model a" in plan["models"][1]["components"]  # the second model's budget holds the first
    measured = sum(served.memory_budget.total_bytes for served in server.host.models())
    assert abs(plan["server_total_bytes"] - measured) <= 0.10 * measured


def test_one_model_unloads_and_reloads_while_the_other_serves(server, stub, admin: ArbiClient,
                                                                      smollm2_dir: Path) -> None:
    expected = generate(stub, _request(QUESTIONS[0], "a")).token_ids
    long_stream = stub.Generate(_request(QUESTIONS[1], "a"))  # in flight on `a` throughout
    assert next(long_stream).tokens
    assert admin.unload_model(drain_timeout_ms=2000, model="b").model == "b"
    with pytest.raises(grpc.RpcError) as gone:
        generate(stub, _request("Hi", "b"))
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    assert generate(stub, _request(QUESTIONS[0], "a")).token_ids == expected
    assert [m.name for m in admin.list_models() if m.resident] == ["a"]

    loading = threading.Thread(target=admin.load_model, args=(f"b={smollm2_dir}",))
    loading.start()
    codes = set()
    while loading.is_alive():
        try:
            generate(stub, _request("Hi", "b"))
            codes.add(grpc.StatusCode.OK)
        except grpc.RpcError as error:
            codes.add(error.code())
            if error.code() == grpc.StatusCode.UNAVAILABLE:
                assert "model 'b' is still loading (loading" in error.details()
    loading.join()
    assert grpc.StatusCode.UNAVAILABLE in codes  # requests during the load were told why
    assert generate(stub, _request(QUESTIONS[0], "b")).token_ids == expected

    assert [r.finish_reason for r in long_stream][-1]  # `a`'s stream finished normally


def test_a_model_that_cannot_fit_is_refused_naming_it_and_the_component(server, stub, admin: ArbiClient,
                                                                         smollm2_dir: Path) -> None:
    # A third model does not fit beside the two; nor does a switch, whose new model loads while the old serves.
    for call in (lambda: admin.load_model(f"third={smollm2_dir}"),
                 lambda: admin.switch_model(f"third={smollm2_dir}", replace_model="b")):
        with pytest.raises(grpc.RpcError) as refused:
            call()
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        details = refused.value.details()
        assert "of model 'third' does not fit: model a " in details and " + model b " in details
        assert "weights (134,515,008 parameters" in details  # its own weights cross the limit
        assert [m.name for m in server.host.models()] == ["a", "b"]
    assert generate(stub, _request(QUESTIONS[0], "b")).token_ids == generate(stub, _request(QUESTIONS[0], "a")).token_ids
