"""EngineConfig validation and the flag/environment layering derived from it."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from arbi_grpc.config import AUTO_RUNNING_REQUESTS_FLOOR, EngineConfig, SchedulingLimits
from arbi_grpc.config_flags import add_flags, resolve
from arbi_grpc.errors import InvalidArgumentError


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_flags(parser, EngineConfig)
    return parser.parse_args(argv)


def test_flag_beats_environment_beats_default() -> None:
    assert resolve(EngineConfig, _parse([]), environ={}).block_size == EngineConfig().block_size
    env = {"ARBI_BLOCK_SIZE": "32", "ARBI_MAX_STEP_TOKENS": "128"}
    config = resolve(EngineConfig, _parse(["--block-size", "8"]), environ=env)
    assert config.block_size == 8 and config.max_step_tokens == 128


def test_bad_values_name_their_source() -> None:
    with pytest.raises(InvalidArgumentError, match="ARBI_BLOCK_SIZE"):
        resolve(EngineConfig, _parse([]), environ={"ARBI_BLOCK_SIZE": "big"})
    with pytest.raises(InvalidArgumentError, match="block_size: must be > 0"):
        resolve(EngineConfig, _parse(["--block-size", "0"]), environ={})
    with pytest.raises(InvalidArgumentError, match="device"):
        EngineConfig(device="tpu")
    with pytest.raises(InvalidArgumentError, match="attention_backend: 'triton' runs on cuda only"):
        EngineConfig(device="cpu", attention_backend="triton")
    with pytest.raises(InvalidArgumentError, match="kv_cache_dtype"):
        EngineConfig(kv_cache_dtype="int4")
    with pytest.raises(InvalidArgumentError, match="kv_cache_dtype: the 'triton' attention kernels read a KV cache"):
        EngineConfig(device="cuda", dtype="float32", kv_cache_dtype="bfloat16")
    assert EngineConfig(device="cpu", kv_cache_dtype="bfloat16").kv_cache_dtype == "bfloat16"  # torch casts


def test_auto_settings_resolve_per_device() -> None:
    cpu, cuda = EngineConfig(device="cpu"), EngineConfig(device="cuda")
    assert (cpu.dtype, cpu.attention_backend, cpu.kv_cache_dtype) == ("float32", "torch", "float32")
    assert (cuda.dtype, cuda.attention_backend, cuda.kv_cache_dtype) == ("bfloat16", "triton", "bfloat16")


def test_auto_is_resolved_before_the_frozen_fields_are_set() -> None:
    config = EngineConfig(device="cuda", dtype="auto", attention_backend="auto", kv_cache_dtype="auto")
    assert (config.dtype, config.attention_backend, config.kv_cache_dtype) == ("bfloat16", "triton", "bfloat16")
    assert dataclasses.replace(config, block_size=32) == EngineConfig(device="cuda", block_size=32)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.dtype = "float32"  # type: ignore[misc]
    with pytest.raises(InvalidArgumentError, match="dtype: must be 'auto', 'float32' or 'bfloat16', got 'int8'"):
        EngineConfig(dtype="int8")
    with pytest.raises(InvalidArgumentError, match="attention_backend: must be one of auto, torch, triton"):
        EngineConfig(attention_backend="xla")


def test_the_scheduling_limits_are_one_type_from_flag_to_scheduler() -> None:
    names = SchedulingLimits.names()
    assert names == ("max_running_requests", "max_step_tokens", "max_prefill_chunk_tokens", "max_waiting_requests",
                     "default_max_output_tokens")
    config = resolve(EngineConfig, _parse(["--max-running-requests", "8"]), environ={"ARBI_MAX_WAITING_REQUESTS": "5"})
    assert config.scheduling_limits == SchedulingLimits(max_running_requests=8, max_waiting_requests=5)
    assert type(config.scheduling_limits) is SchedulingLimits
    # The engine's defaults are the limits', except max_running_requests: auto (0) until the KV pool plan resolves it
    # (tests/unit/memory/test_running_requests.py), the floor a bare SchedulingLimits holds.
    auto = EngineConfig()
    assert auto.running_requests_auto and SchedulingLimits().max_running_requests == AUTO_RUNNING_REQUESTS_FLOOR
    assert {f.name: f.default for f in dataclasses.fields(SchedulingLimits)} == {
        name: getattr(auto.with_running_requests(AUTO_RUNNING_REQUESTS_FLOOR), name) for name in names}
    with pytest.raises(ValueError, match="max_running_requests is auto"):
        auto.scheduling_limits
    with pytest.raises(InvalidArgumentError, match=r"max_running_requests: must be >= 0 \(0 = auto\), got -1"):
        EngineConfig(max_running_requests=-1)
    assert SchedulingLimits.check({"max_step_tokens": 0, "max_tokens": 3}) == [
        ("max_step_tokens", "must be > 0, got 0"),
        ("max_tokens", f"'max_tokens' is not a runtime setting; known: {', '.join(names)}"),
    ]
    with pytest.raises(InvalidArgumentError, match="max_prefill_chunk_tokens: must be > 0, got -1"):
        SchedulingLimits(max_prefill_chunk_tokens=-1)
    with pytest.raises(InvalidArgumentError, match="max_waiting_requests: must be > 0, got 0"):
        resolve(EngineConfig, _parse(["--max-waiting-requests", "0"]), environ={})


def test_kv_exact_blocks_is_a_tkv_window_of_one_to_sixteen_blocks_within_one_kernel_tile() -> None:
    tkv = {"kv_cache_dtype": "tkv", "kv_calibration": "bundle-dir"}
    assert EngineConfig(**tkv).kv_exact_window_blocks == 4  # 0: the newest 64 tokens
    assert [EngineConfig(**tkv, block_size=size).kv_exact_window_blocks for size in (8, 32, 64, 128)] == [8, 2, 1, 1]
    config = resolve(EngineConfig, _parse(["--kv-exact-blocks", "4", "--kv-cache-dtype", "tkv",
                                           "--kv-calibration", "bundle-dir"]), environ={"ARBI_KV_EXACT_BLOCKS": "2"})
    assert config.kv_exact_blocks == 4
    assert EngineConfig(**tkv, kv_exact_blocks=16).kv_exact_blocks == 16  # 16 x 16 tokens: one tile of 256
    refusals = [
        ({**tkv, "kv_exact_blocks": -1}, "must be 0 (the blocks of the newest 64 tokens) or in [1, 16], got -1"),
        ({**tkv, "kv_exact_blocks": 17}, "must be in [1, 16], got 17"),
        ({**tkv, "kv_exact_blocks": 5, "block_size": 64}, "window of 320 tokens, more than the 256"),
        ({"kv_cache_dtype": "bfloat16", "kv_exact_blocks": 2}, "applies to --kv-cache-dtype tkv only"),
        ({**tkv, "block_size": 512}, "window of 512 tokens, more than the 256"),
    ]
    for settings, words in refusals:
        with pytest.raises(InvalidArgumentError) as refused:
            EngineConfig(**settings)
        assert refused.value.field == "kv_exact_blocks" and words in refused.value.description
    assert EngineConfig(kv_cache_dtype="bfloat16", block_size=512).kv_exact_blocks == 0  # no window to check


def test_int8_cpu_weights_run_on_one_cpu_rank_only() -> None:
    assert EngineConfig(cpu_weights="int8").cpu_weights == "int8"
    assert resolve(EngineConfig, _parse(["--cpu-weights", "int8"]), environ={}).cpu_weights == "int8"
    with pytest.raises(InvalidArgumentError, match=r"cpu_weights: int8 runs on the CPU with one rank .* not on "
                                                   r"'cuda' with tensor_parallel_size 1; use --cpu-weights float"):
        EngineConfig(device="cuda", cpu_weights="int8")
    with pytest.raises(InvalidArgumentError, match=r"cpu_weights: int8 .* not on 'cpu' with tensor_parallel_size 2"):
        EngineConfig(tensor_parallel_size=2, cpu_weights="int8")
    with pytest.raises(InvalidArgumentError,
                       match=r"cpu_weights: must be 'auto', 'float', 'int4' or 'int8', got 'int2'"):
        EngineConfig(cpu_weights="int2")


def test_int8_cpu_activations_multiply_block_weights_on_the_cpu_only() -> None:
    assert EngineConfig().cpu_activations == "float"
    assert resolve(EngineConfig, _parse(["--cpu-activations", "int8"]), environ={}).cpu_activations == "int8"
    assert EngineConfig(cpu_weights="int4", cpu_activations="int8").cpu_activations == "int8"
    refusals = [
        ({"device": "cuda"}, "not --cpu-weights auto on 'cuda' with tensor_parallel_size 1"),
        ({"cpu_weights": "float"}, "not --cpu-weights float on 'cpu'"),
        ({"cpu_weights": "int8"}, "not --cpu-weights int8 on 'cpu'"),
        ({"tensor_parallel_size": 2}, "not --cpu-weights auto on 'cpu' with tensor_parallel_size 2"),
    ]
    for settings, words in refusals:
        with pytest.raises(InvalidArgumentError) as refused:
            EngineConfig(cpu_activations="int8", **settings)
        assert refused.value.field == "cpu_activations" and words in refused.value.description
    with pytest.raises(InvalidArgumentError, match=r"cpu_activations: must be 'float' or 'int8', got 'int4'"):
        EngineConfig(cpu_activations="int4")


def test_help_shows_every_flag_with_its_text() -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser, EngineConfig)
    text = "".join(parser.format_help().split())  # help texts with a literal % once broke formatting
    for field in dataclasses.fields(EngineConfig):
        assert "".join(field.metadata["help"].split()) in text, field.name  # wrapped anywhere, hyphens too
