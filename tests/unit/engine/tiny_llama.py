"""A Llama-architecture config small enough for CPU engine tests: GQA 4/2 heads, a vocabulary of 96."""

from __future__ import annotations

from arbi_grpc.models.config import ModelConfig


def tiny_llama_config(num_layers: int = 2, max_positions: int = 512) -> ModelConfig:
    return ModelConfig.from_hf_config({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 96, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": num_layers, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "max_position_embeddings": max_positions, "tie_word_embeddings": True,
        "bos_token_id": 1, "eos_token_id": 2,
    })
