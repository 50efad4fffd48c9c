"""Model fingerprints: stable for the same model, different for a changed config or weights, equal for a
state dict and the same weights saved as an HF-style directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from arbi_grpc.errors import ModelLoadError
from arbi_grpc.kv_codec import model_dir_fingerprint, model_fingerprint

CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2, "transformers_version": "5"}


def _weights(generator: torch.Generator) -> dict[str, torch.Tensor]:
    return {
        "model.embed_tokens.weight": torch.randn(32, 64, generator=generator),
        "model.layers.0.self_attn.k_proj.weight": torch.randn(16, 64, generator=generator),
        "model.layers.1.self_attn.k_proj.weight": torch.randn(16, 64, generator=generator),
        "model.norm.weight": torch.randn(64, generator=generator),
        "model.layers.0.input_layernorm.weight": torch.randn(64, generator=generator),
    }


def test_same_model_same_fingerprint(generator: torch.Generator) -> None:
    weights = _weights(generator)
    copied = {name: tensor.clone() for name, tensor in reversed(list(weights.items()))}
    reordered_config = dict(reversed(list(CONFIG.items())))
    assert model_fingerprint(CONFIG, weights) == model_fingerprint(reordered_config, copied)
    assert model_fingerprint(CONFIG, weights).startswith("tkvfp1:")


def test_changes_change_the_fingerprint(generator: torch.Generator) -> None:
    weights = _weights(generator)
    reference = model_fingerprint(CONFIG, weights)
    assert model_fingerprint({**CONFIG, "hidden_size": 65}, weights) != reference
    probed = dict(weights)
    probed["model.embed_tokens.weight"] = weights["model.embed_tokens.weight"].clone()
    probed["model.embed_tokens.weight"][0, 3] += 1.0
    assert model_fingerprint(CONFIG, probed) != reference
    reshaped = {**weights, "model.norm.weight": torch.randn(65, generator=generator)}
    assert model_fingerprint(CONFIG, reshaped) != reference


def test_tool_bookkeeping_keys_are_ignored(generator: torch.Generator) -> None:
    weights = _weights(generator)
    assert model_fingerprint(CONFIG, weights) == model_fingerprint(
        {**CONFIG, "transformers_version": "9.9", "_name_or_path": "x"}, weights
    )


def test_directory_fingerprint_equals_state_dict_fingerprint(tmp_path: Path, generator: torch.Generator) -> None:
    weights = _weights(generator)
    (tmp_path / "config.json").write_text(json.dumps(CONFIG, indent=2))
    names = sorted(weights)
    save_file({name: weights[name] for name in names[:2]}, str(tmp_path / "model-00001.safetensors"))
    save_file({name: weights[name] for name in names[2:]}, str(tmp_path / "model-00002.safetensors"))
    assert model_dir_fingerprint(tmp_path) == model_fingerprint(CONFIG, weights)


def test_unreadable_model_directory_raises_model_load_error(tmp_path: Path, generator: torch.Generator) -> None:
    with pytest.raises(ModelLoadError, match="config.json"):
        model_dir_fingerprint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    with pytest.raises(ModelLoadError, match="safetensors"):
        model_dir_fingerprint(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ModelLoadError):
        model_dir_fingerprint(tmp_path)
