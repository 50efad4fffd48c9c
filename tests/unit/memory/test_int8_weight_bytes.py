"""`--cpu-weights int8`: the bytes `plan` counts (`quantized_layout.cpu_weight_bytes` with `int8_kinds`) equal
what a loaded decoder holds, for every architecture and both float dtypes, with every layer matmul on the int8
kernel and the embedding table and output projection left float."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.memory.kv_pool import ELEMENT_BYTES
from arbi_grpc.memory.measure import tensor_bytes
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.int8_weights import Int8Linear
from arbi_grpc.models.loader import load_model
from arbi_grpc.models.quantized_layout import cpu_weight_bytes, int8_kinds
from arbi_grpc.models.random_weights import write_random_checkpoint
from tests.unit.memory.shapes import hf_config

CASES = [
    ("LlamaForCausalLM", True, {}, "float32"),
    ("LlamaForCausalLM", False, {"attention_bias": True}, "float32"),
    ("Qwen2ForCausalLM", False, {}, "bfloat16"),
    ("Qwen3ForCausalLM", True, {"head_dim": 32}, "float32"),
]


@pytest.mark.parametrize(("architecture", "tie", "overrides", "dtype"), CASES)
def test_planned_int8_bytes_are_the_loaded_bytes(architecture: str, tie: bool, overrides: dict, dtype: str,
                                                 tmp_path) -> None:
    config = hf_config(architecture, tie=tie, **overrides)
    write_random_checkpoint(config, tmp_path / "model", torch.float32, seed=3)

    model, model_config = load_model(tmp_path / "model", dtype=getattr(torch, dtype), quantize_int8=True)

    assert model_config == ModelConfig.from_hf_config(config)
    kinds = int8_kinds(model_config)
    assert len(kinds) == 7 * model_config.num_layers
    planned = cpu_weight_bytes(model_config, kinds, ELEMENT_BYTES[dtype])
    assert tensor_bytes([*model.parameters(), *model.buffers()]) == planned
    for layer in model.model.layers:
        kernels = (layer.self_attn.qkv, layer.self_attn.output, layer.mlp.gate_up, layer.mlp.down)
        assert all(isinstance(kernel, Int8Linear) for kernel in kernels)
    assert model.model.embed_tokens.weight.dtype == getattr(torch, dtype)
