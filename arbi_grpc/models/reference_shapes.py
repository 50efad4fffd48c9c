"""The shapes of real published models as `config.json` dicts, so benchmarks, GPU tests and `arbi-serve plan
--shape` can size and build them without a checkpoint. Imports no torch.

Values are those of the models' published `config.json` files (architecture, widths, heads, vocabulary,
context, RoPE, tying, special token ids); weights are not described here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.models.config import ModelConfig

REFERENCE_SHAPES: dict[str, dict[str, Any]] = {
    "llama3-8b": {
        "architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 8192,
        "tie_word_embeddings": False, "bos_token_id": 128000, "eos_token_id": 128009,
    },
    "llama3.1-8b": {
        "architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
        "tie_word_embeddings": False, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
    },
    "qwen3-0.6b": {
        "architectures": ["Qwen3ForCausalLM"], "vocab_size": 151936, "hidden_size": 1024,
        "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 40960,
        "tie_word_embeddings": True, "attention_bias": False, "bos_token_id": 151643, "eos_token_id": 151645,
    },
    "qwen3-8b": {
        "architectures": ["Qwen3ForCausalLM"], "vocab_size": 151936, "hidden_size": 4096,
        "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 40960,
        "tie_word_embeddings": False, "attention_bias": False, "bos_token_id": 151643, "eos_token_id": 151645,
    },
    "smollm2-135m": {
        "architectures": ["LlamaForCausalLM"], "vocab_size": 49152, "hidden_size": 576,
        "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "max_position_embeddings": 8192,
        "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
    },
}


def reference_hf_config(shape: str) -> dict[str, Any]:
    """A copy of the `config.json` dict of `shape`; raises InvalidArgumentError listing the known shapes."""
    if shape not in REFERENCE_SHAPES:
        raise InvalidArgumentError("shape", f"unknown shape {shape!r}; known: {', '.join(sorted(REFERENCE_SHAPES))}")
    return dict(REFERENCE_SHAPES[shape])


def model_config_for_shape(shape: str) -> ModelConfig:
    """The ModelConfig of a real model's shape ("llama3-8b", "qwen3-0.6b", ...)."""
    return ModelConfig.from_hf_config(reference_hf_config(shape))


def write_shape_directory(shape: str, directory: Path) -> Path:
    """Writes `config.json` of `shape` into `directory` (created if needed): enough for `plan --model DIR`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(reference_hf_config(shape), indent=2), encoding="utf-8")
    return directory
