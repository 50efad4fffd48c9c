"""Small model configs of each supported architecture for the memory tests (HF config.json dicts)."""

from __future__ import annotations

from typing import Any

from arbi_grpc.models.config import ModelConfig


def hf_config(architecture: str = "LlamaForCausalLM", *, tie: bool = True, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "architectures": [architecture],
        "vocab_size": 1000,
        "hidden_size": 64,
        "intermediate_size": 160,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 512,
        "tie_word_embeddings": tie,
    }
    config.update(overrides)
    return config


def model_config(architecture: str = "LlamaForCausalLM", *, tie: bool = True, **overrides: Any) -> ModelConfig:
    return ModelConfig.from_hf_config(hf_config(architecture, tie=tie, **overrides))
