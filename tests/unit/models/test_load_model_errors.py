"""load_model turns every broken model directory into a ModelLoadError naming the file or tensor."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

from arbi_grpc.errors import ModelLoadError, UnsupportedArchitectureError
from arbi_grpc.models.loader import load_model
from tests.unit.models.paged_harness import randomize_weights

WEIGHTS = "model.safetensors"


@pytest.fixture
def model_dir(tmp_path: Path, torch_generator) -> Path:
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False,
    )
    reference = LlamaForCausalLM(config)
    randomize_weights(reference, torch_generator)
    reference.save_pretrained(tmp_path)
    return tmp_path


def test_intact_directory_loads(model_dir: Path):
    model, config = load_model(model_dir)
    assert config.num_layers == 2
    assert all(not parameter.requires_grad for parameter in model.parameters())


def test_loads_in_bfloat16(model_dir: Path):
    model, _ = load_model(model_dir, dtype=torch.bfloat16)
    assert {parameter.dtype for parameter in model.parameters()} == {torch.bfloat16}


@pytest.mark.parametrize("keep_fraction", [0.0, 0.001, 0.5, 0.999])
def test_truncated_safetensors_names_the_file(model_dir: Path, keep_fraction: float):
    path = model_dir / WEIGHTS
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep_fraction)])
    with pytest.raises(ModelLoadError, match=WEIGHTS):
        load_model(model_dir)


def test_corrupt_header_names_the_file(model_dir: Path, rng: random.Random):
    path = model_dir / WEIGHTS
    data = bytearray(path.read_bytes())
    header_length = int.from_bytes(data[:8], "little")
    for _ in range(20):
        data[8 + rng.randrange(header_length)] = rng.choice(b"{}[]\x00\xff")
    path.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match=WEIGHTS):
        load_model(model_dir)


def test_corrupt_tensor_bytes_are_detected(model_dir: Path):
    path = model_dir / WEIGHTS
    tensors = load_file(path)
    name = "model.layers.1.mlp.up_proj.weight"
    tensors[name].view(-1)[torch.randint(0, tensors[name].numel(), (3,))] = float("nan")
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=name):
        load_model(model_dir)


def test_missing_tensor_is_named(model_dir: Path, rng: random.Random):
    path = model_dir / WEIGHTS
    tensors = load_file(path)
    name = rng.choice(sorted(tensors))
    del tensors[name]
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=f"missing tensor.*{name}"):
        load_model(model_dir)


def test_wrong_shape_is_named(model_dir: Path):
    path = model_dir / WEIGHTS
    tensors = load_file(path)
    name = "model.layers.0.self_attn.k_proj.weight"
    tensors[name] = torch.zeros(tensors[name].shape[0] + 8, tensors[name].shape[1])
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=f"{name}.*shape"):
        load_model(model_dir)


def test_unexpected_tensor_is_named(model_dir: Path):
    path = model_dir / WEIGHTS
    tensors = load_file(path)
    tensors["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(32)
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match="unexpected tensor 'model.layers.0.self_attn.q_proj.bias'"):
        load_model(model_dir)


def test_untied_checkpoint_without_lm_head_is_an_error(model_dir: Path):
    path = model_dir / WEIGHTS
    tensors = load_file(path)
    del tensors["lm_head.weight"]
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match="lm_head.weight"):
        load_model(model_dir)


def test_index_naming_a_missing_shard(model_dir: Path):
    names = load_file(model_dir / WEIGHTS).keys()
    index = {"metadata": {}, "weight_map": {name: "model-00001-of-00002.safetensors" for name in names}}
    (model_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelLoadError, match="model-00001-of-00002.safetensors"):
        load_model(model_dir)


@pytest.mark.parametrize("content", [None, "{not json", "[1, 2]"])
def test_missing_or_broken_config_json(model_dir: Path, content: str | None):
    config_path = model_dir / "config.json"
    if content is None:
        config_path.unlink()
    else:
        config_path.write_text(content)
    with pytest.raises(ModelLoadError, match="config.json"):
        load_model(model_dir)


def test_no_weight_files(model_dir: Path):
    (model_dir / WEIGHTS).unlink()
    with pytest.raises(ModelLoadError, match="safetensors"):
        load_model(model_dir)


def test_missing_directory(tmp_path: Path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "absent")


def test_unsupported_architecture_in_directory(model_dir: Path):
    config_path = model_dir / "config.json"
    config = json.loads(config_path.read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    config_path.write_text(json.dumps(config))
    with pytest.raises(UnsupportedArchitectureError, match="GPT2LMHeadModel"):
        load_model(model_dir)
