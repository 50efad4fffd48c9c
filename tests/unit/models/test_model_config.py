"""ModelConfig.from_hf_config: supported architectures, both HF config layouts, precise errors."""

from __future__ import annotations

import random

import pytest
from transformers import LlamaConfig, Qwen2Config, Qwen3Config

from arbi_grpc.errors import ModelLoadError, UnsupportedArchitectureError
from arbi_grpc.models.config import SUPPORTED_ARCHITECTURES, Llama3RopeScaling, ModelConfig


def _llama_dict(rng: random.Random, **overrides) -> dict:
    heads = rng.choice([2, 4, 8])
    config = {
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": rng.randint(100, 1000),
        "hidden_size": heads * 16,
        "intermediate_size": rng.randint(32, 256),
        "num_hidden_layers": rng.randint(1, 40),
        "num_attention_heads": heads,
        "num_key_value_heads": heads // 2,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    config.update(overrides)
    return config


def test_llama_fields_and_derived_head_dim(rng):
    hf = _llama_dict(rng)
    config = ModelConfig.from_hf_config(hf)
    assert config.num_layers == hf["num_hidden_layers"]
    assert config.head_dim == hf["hidden_size"] // hf["num_attention_heads"]
    assert config.num_query_groups == 2
    assert config.eos_token_ids == (2,) and config.bos_token_id == 1
    assert (config.attention_bias, config.output_projection_bias, config.qk_norm) == (False, False, False)
    assert config.rope_scaling is None and config.tie_word_embeddings


def test_eos_list_and_missing_kv_heads_default(rng):
    hf = _llama_dict(rng, eos_token_id=[2, 5, 7])
    del hf["num_key_value_heads"]
    config = ModelConfig.from_hf_config(hf)
    assert config.eos_token_ids == (2, 5, 7)
    assert config.num_kv_heads == config.num_heads


@pytest.mark.parametrize("layout", ["transformers4", "transformers5"])
def test_llama3_rope_scaling_in_both_layouts(layout, rng):
    scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    theta = rng.choice([10000.0, 500000.0])
    if layout == "transformers4":
        hf = _llama_dict(rng, rope_theta=theta, rope_scaling={"rope_type": "llama3", **scaling})
    else:
        hf = _llama_dict(rng, rope_parameters={"rope_type": "llama3", "rope_theta": theta, **scaling})
        del hf["rope_theta"]
    config = ModelConfig.from_hf_config(hf)
    assert config.rope_theta == theta
    assert config.rope_scaling == Llama3RopeScaling(8.0, 1.0, 4.0, 8192)


def test_configs_written_by_transformers_parse():
    qwen2 = ModelConfig.from_hf_config({**Qwen2Config(vocab_size=500).to_dict(), "architectures": ["Qwen2ForCausalLM"]})
    assert (qwen2.attention_bias, qwen2.output_projection_bias, qwen2.qk_norm) == (True, False, False)
    qwen3_dict = {**Qwen3Config(vocab_size=500, head_dim=64).to_dict(), "architectures": ["Qwen3ForCausalLM"]}
    qwen3 = ModelConfig.from_hf_config(qwen3_dict)
    assert qwen3.qk_norm and qwen3.head_dim == 64 and not qwen3.attention_bias
    llama = ModelConfig.from_hf_config({**LlamaConfig(vocab_size=500).to_dict(), "architectures": ["LlamaForCausalLM"]})
    assert llama.rope_theta == LlamaConfig().rope_parameters["rope_theta"]


def test_unsupported_architecture_names_it_and_the_supported_set(rng):
    with pytest.raises(UnsupportedArchitectureError) as caught:
        ModelConfig.from_hf_config(_llama_dict(rng, architectures=["MistralForCausalLM"]))
    assert caught.value.architecture == "MistralForCausalLM"
    assert caught.value.supported == SUPPORTED_ARCHITECTURES


@pytest.mark.parametrize(
    "key", ["vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "architectures"]
)
def test_missing_required_key_is_named(key, rng):
    hf = _llama_dict(rng)
    del hf[key]
    with pytest.raises(ModelLoadError, match=key):
        ModelConfig.from_hf_config(hf)


@pytest.mark.parametrize(
    "override,message",
    [
        ({"hidden_size": "576"}, "hidden_size"),
        ({"num_attention_heads": 6, "num_key_value_heads": 4}, "multiple of"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
        ({"rms_norm_eps": 0.0}, "rms_norm_eps"),
        ({"eos_token_id": 10**9}, "outside the vocabulary"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "low_freq_factor"),
    ],
)
def test_invalid_values_raise_model_load_error(override, message, rng):
    with pytest.raises(ModelLoadError, match=message):
        ModelConfig.from_hf_config(_llama_dict(rng, **override))


@pytest.mark.parametrize(
    "override",
    [
        {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
        {"hidden_act": "gelu"},
        {"use_sliding_window": True},
        {"partial_rotary_factor": 0.5},
    ],
)
def test_unsupported_features_name_their_boundary(override, rng):
    with pytest.raises(NotImplementedError, match="supported"):
        ModelConfig.from_hf_config(_llama_dict(rng, **override))
