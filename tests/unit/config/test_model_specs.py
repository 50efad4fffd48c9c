"""The served chat models from the config: a repeated --model (NAME=SPEC names one), ARBI_MODEL's list, or a
TOML models file with per-model settings; bad entries are refused naming the file, entry and key."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from arbi_grpc.config import EngineConfig
from arbi_grpc.config_flags import add_flags, resolve
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.model_specs import ModelSpec, parse_model_spec, served_model_configs


def _resolve(argv: list[str], environ: dict[str, str] | None = None) -> EngineConfig:
    parser = argparse.ArgumentParser()
    add_flags(parser, EngineConfig)
    return resolve(EngineConfig, parser.parse_args(argv), environ=environ or {})


def test_model_spec_names_a_model_or_keeps_its_own_name() -> None:
    assert parse_model_spec("SmolLM2-135M-Instruct") == ModelSpec("", "SmolLM2-135M-Instruct")
    assert parse_model_spec(" chat = /models/llama ") == ModelSpec("chat", "/models/llama")
    assert str(ModelSpec("chat", "/models/llama")) == "chat=/models/llama"
    for bad in ("", "chat=", "=spec"):
        with pytest.raises(InvalidArgumentError, match="model: expected SPEC or NAME=SPEC"):
            parse_model_spec(bad)


def test_repeated_model_flag_lists_the_models_the_first_being_the_default() -> None:
    config = _resolve(["--model", "a=SmolLM2-135M-Instruct", "--model", "b=SmolLM2-135M-Instruct",
                       "--kv-cache-memory-mib", "16"])
    assert config.model == "a=SmolLM2-135M-Instruct,b=SmolLM2-135M-Instruct"
    models = served_model_configs(config)
    assert [m.model for m in models] == ["a=SmolLM2-135M-Instruct", "b=SmolLM2-135M-Instruct"]
    assert all(m.kv_cache_memory_mib == 16 for m in models)  # per model
    from_env = served_model_configs(_resolve([], {"ARBI_MODEL": "x=one, two"}))
    assert [m.model for m in from_env] == ["x=one", "two"]
    assert [m.model for m in served_model_configs(EngineConfig())] == ["SmolLM2-135M-Instruct"]


def test_models_file_gives_each_model_its_own_settings(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text('[[model]]\nname = "chat"\nspec = "SmolLM2-135M-Instruct"\nkv_cache_memory_mib = 64\n\n'
                    '[[model]]\nspec = "/models/other"\nmax_model_len = 512\n')
    models = served_model_configs(EngineConfig(models_file=str(path), kv_cache_memory_mib=8))
    assert [(m.model, m.kv_cache_memory_mib, m.max_model_len) for m in models] == [
        ("chat=SmolLM2-135M-Instruct", 64, 0), ("/models/other", 8, 512)]
    assert all(m.models_file == "" for m in models)


@pytest.mark.parametrize(("text", "message"), [
    ("[[model]]\nname = 'x'\n", "model 1: 'spec' (the model to load) is required"),
    ("[[model]]\nspec = 'a'\nblock_sise = 8\n", "model 1: unknown key(s) block_sise"),
    ("[[model]]\nspec = 'a'\ndevice = 'cuda'\n", "model 1: unknown key(s) device"),  # server-wide
    ("[[model]]\nspec = 'a'\n[[model]]\nspec = 'b'\nblock_size = '8'\n", "model 2: block_size must be int"),
    ("[[model]]\nspec = 'a'\nenable_prefix_cache = 1\n", "enable_prefix_cache must be bool"),
    ("[[model]]\nspec = 'a'\nblock_size = 0\n", "block_size: model 'a': must be > 0"),
    ("models = 1\n", "expected one or more [[model]] tables, not models"),
    ("[[model]\n", "is not valid TOML"),
])
def test_bad_models_files_are_refused_naming_the_entry(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "models.toml"
    path.write_text(text)
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        served_model_configs(EngineConfig(models_file=str(path)))


def test_models_file_and_model_flag_are_exclusive(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="models_file: list the models either in the file or with"):
        served_model_configs(EngineConfig(model="other", models_file=str(tmp_path / "m.toml")))
    with pytest.raises(InvalidArgumentError, match="models_file: cannot read"):
        served_model_configs(EngineConfig(models_file=str(tmp_path / "missing.toml")))
