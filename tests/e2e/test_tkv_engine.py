"""TKV through a real gRPC server: one wikitext window scored with a K8V8 cache within 0.5% of the fp32 KV
server's loss, the setting and its memory in the admin API, ReloadKvCalibration (good and bad bundles, the old
one serving on failure, acting on the model it names), and boot refusals (no bundle, bad bits, another model's
bundle, a corrupt bundle).

The bundles here are uncalibrated (`TkvCalibration.uniform`: rotation only), which K8V8 does not need; the
calibrated quality table comes from benchmarks/tkv_perplexity.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from arbi_client.arbi.v1 import admin_service_pb2 as admin_pb
from arbi_client.arbi.v1 import admin_service_pb2_grpc
from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb

from arbi_grpc.config import EngineConfig
from arbi_grpc.errors import InvalidArgumentError, ModelLoadError
from arbi_grpc.kv_codec import TkvCalibration, TkvSpec, model_dir_fingerprint
from arbi_grpc.kv_codec.calibration.bundle import TENSORS_FILE
from arbi_grpc.memory.kv_pool import num_sink_blocks
from arbi_grpc.served_model import build_served_model
from tests.conftest import wait_for_idle_pool
from tests.e2e.helpers import chat_request, generate, stub_for

WIKITEXT = Path(__file__).resolve().parents[1] / "data" / "wikitext-2" / "wiki.test.raw"
WINDOW_TOKENS = 512
OTHER_MODEL = "tkvfp1:" + "0" * 32


def _uniform_bundle(directory: Path, fingerprint: str, spec: TkvSpec) -> Path:
    TkvCalibration.uniform(fingerprint, spec, num_layers=30, num_kv_heads=3, head_dim=64).save(directory)
    return directory


@pytest.fixture(scope="module")
def bundles(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tkv-bundles")
    fingerprint = model_dir_fingerprint(smollm2_dir)
    corrupt = _uniform_bundle(root / "corrupt", fingerprint, TkvSpec(8, 8, 32, 1))
    tensors = corrupt / TENSORS_FILE
    tensors.write_bytes(tensors.read_bytes()[:-64])  # truncated
    return {
        "k8v8": _uniform_bundle(root / "k8v8", fingerprint, TkvSpec(8, 8, 32, 1)),
        "k4v3": _uniform_bundle(root / "k4v3", fingerprint, TkvSpec(4, 3, 32, 1)),
        "other_model": _uniform_bundle(root / "other", OTHER_MODEL, TkvSpec(8, 8, 32, 1)),
        "corrupt": corrupt,
    }


@pytest.fixture(scope="module")
def tkv_server(smollm2_dir: Path, bundles: dict[str, Path]) -> Iterator:
    from arbi_grpc.server import GrpcServer

    config = EngineConfig(model=str(smollm2_dir), kv_cache_dtype="tkv", kv_calibration=str(bundles["k8v8"]),
                          kv_cache_memory_mib=32, max_waiting_requests=16, max_running_requests=8)
    server = GrpcServer(build_served_model(config)).start()
    # A second, non-default model with a plain cache: ReloadKvCalibration acts on the model it names.
    server.load_models([EngineConfig(model=f"plain={smollm2_dir}", kv_cache_memory_mib=16, max_running_requests=8)])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def window(served_smollm2) -> list[int]:
    """The first 512 tokens of wikitext-2's test file, tokenized whole without special tokens."""
    text = WIKITEXT.read_text(encoding="utf-8")[:20_000]  # ample for 512 tokens
    return served_smollm2.served.inputs.tokenizer.encode(text, add_special_tokens=False)[:WINDOW_TOKENS]


def _admin(server) -> tuple[grpc.Channel, admin_service_pb2_grpc.AdminServiceStub, tuple]:
    channel = grpc.insecure_channel(server.target)
    metadata = (("authorization", f"Bearer {server.credentials.admin_token}"),)
    return channel, admin_service_pb2_grpc.AdminServiceStub(channel), metadata


def _mean_loss(server, token_ids: list[int]) -> float:
    channel, stub = stub_for(server.target)
    request = pb.GenerateRequest(
        token_ids=types_pb.TokenIds(ids=token_ids),
        stopping=types_pb.StoppingCriteria(max_output_tokens=1),
        logprobs=types_pb.LogprobOptions(include_prompt_logprobs=True),
    )
    with channel:
        prompt_tokens = list(generate(stub, request).responses[0].prompt_tokens)
    assert len(prompt_tokens) == len(token_ids)
    return -sum(token.logprob for token in prompt_tokens[1:]) / (len(prompt_tokens) - 1)


def test_k8v8_window_loss_is_within_half_a_percent_of_fp32(served_smollm2, tkv_server, window) -> None:
    fp32_loss = _mean_loss(served_smollm2, window)
    tkv_loss = _mean_loss(tkv_server, window)
    assert tkv_loss != fp32_loss  # the TKV server's attention read quantized K/V
    assert math.isclose(tkv_loss, fp32_loss, rel_tol=0.005), (tkv_loss, fp32_loss)
    wait_for_idle_pool(tkv_server.served.engine)


def test_server_info_and_memory_report_name_the_setting(served_smollm2, tkv_server) -> None:
    reports = {}
    for name, server in (("fp32", served_smollm2), ("tkv", tkv_server)):
        channel, admin, metadata = _admin(server)
        with channel:
            info = admin.GetServerInfo(admin_pb.GetServerInfoRequest(), metadata=metadata)
            reports[name] = (info.kv_codec, admin.GetMemoryReport(admin_pb.GetMemoryReportRequest(), metadata=metadata))
    assert reports["fp32"][0] == "none" and reports["tkv"][0] == "tkv K8V8 G32 sink1 exact4"
    fp32, tkv = reports["fp32"][1], reports["tkv"][1]
    assert fp32.kv_bytes_per_token_per_layer == 2 * 3 * 64 * 4  # K and V, 3 kv heads, head_dim 64, float32
    assert fp32.kv_cache_bytes == fp32.kv_block_count * fp32.kv_block_bytes
    # 16 tokens x 30 layers x 3 heads x (2 x 64 code bytes + 2 x 2 groups x 4 bytes); apart from the blocks, one
    # fp16 sink token's K and V (30 layers, 3 heads, head_dim 64) for each block that may start a sequence, and a
    # tail slot of the exact window's 64 such tokens (4 blocks, the default) for each request that may run
    assert tkv.kv_block_bytes == 16 * 30 * 3 * (2 * 64 + 2 * 2 * 4)
    sink_rows = num_sink_blocks(tkv.kv_block_count, tkv_server.served.config.max_running_requests)
    assert sink_rows < tkv.kv_block_count
    tail_slots = tkv_server.served.config.max_running_requests
    assert tkv.kv_cache_bytes == (tkv.kv_block_count * tkv.kv_block_bytes + sink_rows * 30 * 3 * 64 * 2 * 2
                                  + tail_slots * 30 * 64 * 3 * 64 * 2 * 2)
    # The running requests each load was made for and why: the flag, or auto's rule (256 MiB of fp32 holds fewer
    # than 64 sequences of 2048 tokens: the floor).
    assert (tkv.max_running_requests, tkv.max_running_requests_source) == (8, "max_running_requests=8")
    # The session server is booted by whichever module comes first, with the limit given or left to auto.
    assert fp32.max_running_requests == 64
    assert fp32.max_running_requests_source in (
        "max_running_requests=64", "auto: the floor, within 64..256; the KV pool holds fewer sequences of 2048 tokens")
    for report in (fp32, tkv):
        assert report.kv_capacity_token_count == report.kv_block_count * report.kv_block_tokens
        assert report.kv_bytes_per_token_per_layer == report.kv_cache_bytes / (report.kv_capacity_token_count * 30)


def _reload(server, path: str, kv_bits: str = "", model: str = "") -> admin_pb.ReloadKvCalibrationResponse:
    channel, admin, metadata = _admin(server)
    with channel:
        request = admin_pb.ReloadKvCalibrationRequest(path=path, kv_bits=kv_bits, drain_timeout_ms=5000, model=model)
        return admin.ReloadKvCalibration(request, metadata=metadata)


def _kv_codec(server) -> str:
    channel, admin, metadata = _admin(server)
    with channel:
        return admin.GetServerInfo(admin_pb.GetServerInfoRequest(), metadata=metadata).kv_codec


@pytest.mark.parametrize(
    "bundle,kv_bits,code,words",
    [
        ("other_model", "", grpc.StatusCode.INVALID_ARGUMENT, [OTHER_MODEL, "calibrated for model"]),
        ("corrupt", "", grpc.StatusCode.DATA_LOSS, ["checksum"]),
        ("k8v8", "7", grpc.StatusCode.INVALID_ARGUMENT, ["kv_bits", "7 bits is not supported"]),
        ("k8v8", "9/4", grpc.StatusCode.INVALID_ARGUMENT, ["kv_bits", "between 2 and 8"]),
        ("missing", "", grpc.StatusCode.INVALID_ARGUMENT, ["not a directory"]),
    ],
)
def test_a_bad_reload_is_refused_and_the_old_bundle_keeps_serving(tkv_server, bundles, tmp_path, bundle, kv_bits,
                                                                 code, words) -> None:
    path = str(bundles.get(bundle, tmp_path / "missing"))
    with pytest.raises(grpc.RpcError) as refused:
        _reload(tkv_server, path, kv_bits)
    assert refused.value.code() == code
    assert all(word in refused.value.details() for word in words), refused.value.details()
    assert _kv_codec(tkv_server) == "tkv K8V8 G32 sink1 exact4"
    channel, stub = stub_for(tkv_server.target)
    with channel:
        assert "Paris" in generate(stub, chat_request("What is the capital of France?")).text
    wait_for_idle_pool(tkv_server.served.engine)


def test_reload_swaps_the_bits_flushes_the_prefix_cache_and_serves(tkv_server, bundles) -> None:
    channel, stub = stub_for(tkv_server.target)
    engine = tkv_server.served.engine
    with channel:
        before = generate(stub, chat_request("What is the capital of France?", max_output_tokens=8))
        assert engine.stats().num_cached_blocks > 0
        sink_rows = engine.runner.kv_cache.num_sink_blocks
        reloaded = _reload(tkv_server, str(bundles["k4v3"]), model=tkv_server.served.name)
        assert (reloaded.kv_codec, reloaded.cancelled_request_count) == ("tkv K4V3 G32 sink1 exact4", 0)
        assert reloaded.flushed_block_count > 0 and engine.stats().num_cached_blocks == 0
        assert _kv_codec(tkv_server) == "tkv K4V3 G32 sink1 exact4"
        assert engine.runner.kv_cache.bytes_per_block == 30 * 16 * 3 * (32 + 24 + 2 * 2 * 4)
        assert engine.runner.kv_cache.num_sink_blocks == sink_rows == engine.scheduler.block_manager.num_first_blocks
        # Uncalibrated K4V3 still speaks (its quality is the benchmark's business, not this test's).
        assert len(generate(stub, chat_request("What is the capital of France?", max_output_tokens=8)).token_ids) == 8
        assert _reload(tkv_server, str(bundles["k4v3"]), kv_bits="8").kv_codec == "tkv K8V8 G32 sink1 exact4"
        after = generate(stub, chat_request("What is the capital of France?", max_output_tokens=8))
    assert after.token_ids == before.token_ids
    wait_for_idle_pool(engine)


def test_reload_needs_a_tkv_server(served_smollm2, bundles) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        _reload(served_smollm2, str(bundles["k8v8"]))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "--kv-cache-dtype tkv" in refused.value.details()


def test_reload_acts_on_the_model_it_names(tkv_server, bundles) -> None:
    codec = _kv_codec(tkv_server)
    with pytest.raises(grpc.RpcError) as plain:  # the non-default model runs no TKV cache: refused, not the default
        _reload(tkv_server, str(bundles["k8v8"]), model="plain")
    assert plain.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "--kv-cache-dtype tkv" in plain.value.details()
    with pytest.raises(grpc.RpcError) as unknown:
        _reload(tkv_server, str(bundles["k8v8"]), model="no-such-model")
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    assert "model 'no-such-model' is not served here" in unknown.value.details()
    assert _kv_codec(tkv_server) == codec  # the default model's bundle is untouched
    plain_engine = tkv_server.host.resident("plain").engine
    channel, stub = stub_for(tkv_server.target)
    with channel:
        request = chat_request("Say hi.", max_output_tokens=4)
        request.model = "plain"
        assert generate(stub, request).token_ids  # the named model still serves
    wait_for_idle_pool(plain_engine)


def test_boot_refuses_tkv_without_a_usable_bundle(smollm2_dir: Path, bundles) -> None:
    model = str(smollm2_dir)
    with pytest.raises(InvalidArgumentError, match="arbi-serve calibrate"):
        EngineConfig(model=model, kv_cache_dtype="tkv")
    for bits in ("1", "7", "9", "4/10", "four"):
        with pytest.raises(InvalidArgumentError, match="kv_bits"):
            EngineConfig(model=model, kv_cache_dtype="tkv", kv_calibration=str(bundles["k8v8"]), kv_bits=bits)
    with pytest.raises(InvalidArgumentError) as other:
        build_served_model(EngineConfig(model=model, kv_cache_dtype="tkv", kv_calibration=str(bundles["other_model"])))
    assert OTHER_MODEL in str(other.value) and model_dir_fingerprint(smollm2_dir) in str(other.value)
    with pytest.raises(ModelLoadError, match="checksum"):
        build_served_model(EngineConfig(model=model, kv_cache_dtype="tkv", kv_calibration=str(bundles["corrupt"])))



def test_a_two_block_exact_window_reuses_prefixes_on_smollm2(smollm2_dir: Path, bundles) -> None:
    """--kv-exact-blocks 2 on the real model, the engine alone (a server's boot adds only its memory profile): a
    chat prompt repeated after an unrelated request hits the prefix cache, and its reused block in the first query's
    window, seeded decoded into a tail slot the unrelated request filled, moves the log-probabilities a little but
    not the answer."""
    import torch

    from arbi_grpc.attention.selection import build_kv_cache, select_attention_backend
    from arbi_grpc.engine.input_processor import ChatPrompt, InputProcessor, TextPrompt
    from arbi_grpc.engine.offline import generate as generate_offline
    from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
    from arbi_grpc.kv_codec.calibration.engine_bundle import load_engine_calibration
    from arbi_grpc.models.loader import load_model
    from arbi_grpc.served_model import assemble_engine, build_runner
    from arbi_grpc.text.tokenizer import TextTokenizer

    config = EngineConfig(model=str(smollm2_dir), kv_cache_dtype="tkv", kv_calibration=str(bundles["k8v8"]),
                          kv_exact_blocks=2, max_running_requests=2)
    backend = select_attention_backend(config)
    model, model_config = load_model(smollm2_dir, dtype=torch.float32, device=torch.device("cpu"),
                                     attention_backend=backend)
    kv_cache = build_kv_cache(config, model_config, 32, load_engine_calibration(config, smollm2_dir))
    runner, _ = build_runner(model, kv_cache, config, 512, backend)
    tokenizer = TextTokenizer.from_model_dir(smollm2_dir)
    inputs = InputProcessor(tokenizer, model_config.vocab_size, 512)
    engine = assemble_engine(runner, model_config, tokenizer, config, 512)
    question = ChatPrompt(({"role": "user", "content": "What is the capital of France?"},))
    unrelated = TextPrompt("Photosynthesis lets plants turn sunlight, water and carbon dioxide into sugar and oxygen; "
                           "it happens in the chloroplasts of leaf cells.")
    engine.start()
    try:
        first, _, repeated = (
            generate_offline(engine, [inputs.build(f"r{i}", prompt, SamplingParams(temperature=0.0),
                                                   StoppingParams(max_output_tokens=8))])[0]
            for i, prompt in enumerate((question, unrelated, question))
        )  # one at a time: each runs in tail slot 0
        stats = engine.stats()
    finally:
        engine.shutdown()
    assert kv_cache.setting_name == "tkv K8V8 G32 sink1 exact2"
    assert stats.prefix_cache_hit_tokens >= 16
    assert "Paris" in tokenizer.decode(first.token_ids) and repeated.token_ids == first.token_ids
    differences = [abs(a - b) for a, b in zip(first.logprobs, repeated.logprobs)]
    assert max(differences) < 0.1, differences  # an unseeded (stale) slot: 0.72 here, and another answer
