"""EngineConfig validation and the flag/environment layering derived from it."""

from __future__ import annotations

import argparse

import pytest

from arbi_grpc.config import EngineConfig
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
