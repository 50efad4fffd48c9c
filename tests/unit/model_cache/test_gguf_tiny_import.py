"""Import of tiny random llama / qwen2 / qwen3 GGUFs: exact weights, Q/K row order, configs HF accepts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from arbi_grpc.models.gguf.importer import import_gguf
from arbi_grpc.models.gguf.tensors import undo_rope_row_interleave


def imported(make_tiny_gguf, tmp_path: Path, **spec) -> tuple[object, dict, dict[str, np.ndarray]]:
    tiny = make_tiny_gguf(**spec)
    out = tmp_path / "out"
    import_gguf(tiny.path, out)
    config = json.loads((out / "config.json").read_text())
    return tiny, config, load_file(out / "model.safetensors")


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_weights_round_trip_exactly_in_hf_order(make_tiny_gguf, tmp_path: Path, arch: str) -> None:
    tiny, _, weights = imported(make_tiny_gguf, tmp_path, arch=arch, tied=False)
    assert set(weights) == set(tiny.hf_weights)
    for name, expected in tiny.hf_weights.items():
        np.testing.assert_array_equal(weights[name], expected, err_msg=name)


def test_unpermute_inverts_llama_cpp_permutation_for_weights_and_biases(llama_cpp_permute) -> None:
    rng = np.random.default_rng()
    for heads, head_dim in [(9, 64), (3, 64), (4, 16), (1, 2)]:
        weight = rng.standard_normal((heads * head_dim, 5)).astype(np.float32)
        bias = rng.standard_normal(heads * head_dim).astype(np.float32)
        np.testing.assert_array_equal(undo_rope_row_interleave(llama_cpp_permute(weight, heads), heads), weight)
        np.testing.assert_array_equal(undo_rope_row_interleave(llama_cpp_permute(bias, heads), heads), bias)
        assert not np.array_equal(llama_cpp_permute(weight, heads), weight) or head_dim == 2


@pytest.mark.parametrize(
    ("arch", "hf_class", "extra"),
    [("llama", "LlamaForCausalLM", {"attention_bias": False}), ("qwen2", "Qwen2ForCausalLM", {}),
     ("qwen3", "Qwen3ForCausalLM", {"attention_bias": False})],
)
def test_config_fields_per_architecture(
    make_tiny_gguf, tmp_path: Path, arch: str, hf_class: str, extra: dict
) -> None:
    # qwen3 with head_dim * heads != hidden: head_dim must come from attention.key_length
    tiny, config, _ = imported(make_tiny_gguf, tmp_path, arch=arch, head_dim=32 if arch == "qwen3" else 16)
    assert config["architectures"] == [hf_class] and config["model_type"] == arch
    assert config["vocab_size"] == len(tiny.tokens)
    assert (config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]) == (64, 96, 2)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 2)
    assert config["head_dim"] == tiny.spec.head_dim
    assert (config["rms_norm_eps"], config["rope_theta"], config["max_position_embeddings"]) == (1e-6, 50000.0, 256)
    assert config["tie_word_embeddings"] is True
    assert extra.items() <= config.items()


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("none", None), ("linear", {"rope_type": "linear", "factor": 4.0}),
     ("yarn", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})],
)
def test_rope_scaling_metadata_maps_to_hf(make_tiny_gguf, tmp_path: Path, kind: str, expected: dict | None) -> None:
    _, config, _ = imported(make_tiny_gguf, tmp_path, rope_scaling_type=kind)
    assert config["rope_scaling"] == expected


def test_unsupported_rope_scaling_is_a_precise_not_implemented(make_tiny_gguf, tmp_path: Path) -> None:
    with pytest.raises(NotImplementedError, match="RoPE scaling type 'longrope'"):
        imported(make_tiny_gguf, tmp_path, rope_scaling_type="longrope")


def test_untied_output_becomes_lm_head(make_tiny_gguf, tmp_path: Path) -> None:
    tiny, config, weights = imported(make_tiny_gguf, tmp_path, tied=False)
    assert config["tie_word_embeddings"] is False
    np.testing.assert_array_equal(weights["lm_head.weight"], tiny.hf_weights["lm_head.weight"])


def test_quantized_embedding_is_dequantized_to_float32(make_tiny_gguf, tmp_path: Path) -> None:
    tiny, _, weights = imported(make_tiny_gguf, tmp_path, quantize_embedding=True)
    assert weights["model.embed_tokens.weight"].dtype == np.float32
    np.testing.assert_array_equal(weights["model.embed_tokens.weight"], tiny.hf_weights["model.embed_tokens.weight"])


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_transformers_loads_import_with_identical_parameters(make_tiny_gguf, tmp_path: Path, arch: str) -> None:
    from transformers import AutoModelForCausalLM

    tiny, _, _ = imported(make_tiny_gguf, tmp_path, arch=arch, tied=False)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32)
    state = model.state_dict()
    for name, expected in tiny.hf_weights.items():
        torch.testing.assert_close(state[name], torch.from_numpy(expected), rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_engine_loader_accepts_the_import(make_tiny_gguf, tmp_path: Path, arch: str) -> None:
    from arbi_grpc.models.loader import load_model

    tiny, _, _ = imported(make_tiny_gguf, tmp_path, arch=arch, head_dim=32 if arch == "qwen3" else 16)
    model, config = load_model(tmp_path / "out")
    assert (config.num_layers, config.head_dim, config.tie_word_embeddings) == (2, tiny.spec.head_dim, True)
    state = model.state_dict()
    for name, expected in tiny.hf_weights.items():
        torch.testing.assert_close(state[name], torch.from_numpy(expected), rtol=0, atol=0, msg=name)
