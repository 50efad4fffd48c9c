"""`--cpu-weights int4` (auto's choice for a GGUF import on one CPU rank): the bytes `plan` counts (`quantized_layout.cpu_weight_bytes` with the stored kinds) equal
what the loaded SmolLM2 decoder holds: every layer matmul, the logits and the embedding lookup on its stored
Q4_1 / Q8_0 blocks (`BlockLinear`, the tied table held once), no float copy of the table."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from arbi_grpc.config import EngineConfig
from arbi_grpc.memory.budget import MemoryLimit
from arbi_grpc.memory.estimate import estimate_budget
from arbi_grpc.memory.kv_pool import KVPoolPlan
from arbi_grpc.memory.measure import tensor_bytes
from arbi_grpc.models.block_linear import BlockEmbedding, BlockLinear
from arbi_grpc.models.loader import load_model
from arbi_grpc.models.quantized_layout import cpu_weight_bytes, cpu_weight_form, with_stored_quantization


def test_planned_block_bytes_are_the_loaded_bytes(smollm2_dir: Path) -> None:
    model, config = load_model(smollm2_dir, keep_quantized=True)

    stored = with_stored_quantization(config, smollm2_dir)
    planned = cpu_weight_bytes(stored, dict(stored.quantized_matrices), 4)
    assert tensor_bytes([*model.parameters(), *model.buffers()]) == planned
    for layer in model.model.layers:
        kernels = (layer.self_attn.qkv, layer.self_attn.output, layer.mlp.gate_up, layer.mlp.down)
        assert all(isinstance(kernel, BlockLinear) for kernel in kernels)
    assert isinstance(model.model.embed_tokens, BlockEmbedding)
    assert model.model.embed_tokens.table is model.logits_projection
    assert all(parameter.shape[0] != config.vocab_size for parameter in model.parameters())


def test_auto_holds_a_gguf_import_as_stored_on_one_cpu_rank(smollm2_dir: Path, monkeypatch,
                                                            tmp_path: Path) -> None:
    stored = with_stored_quantization(load_model(smollm2_dir, keep_quantized=True)[1], smollm2_dir)
    plain = dataclasses.replace(stored, quantized_matrices=())
    assert cpu_weight_form("auto", "cpu", 1, stored) == "int4"
    assert cpu_weight_form("auto", "cpu", 1, plain) == "float"  # nothing stored quantized
    assert cpu_weight_form("auto", "cpu", 2, stored) == "float"  # the blocks are not split across ranks
    assert cpu_weight_form("auto", "cuda", 1, stored) == "float"
    assert cpu_weight_form("float", "cpu", 1, stored) == "float"  # an explicit form is kept
    assert cpu_weight_form("int8", "cpu", 1, stored) == "int8"
    limit, pool = MemoryLimit(64 << 30, "test"), KVPoolPlan(16, 16, 1024, 2048)

    def planned_weights(cpu_weights: str) -> int:
        return estimate_budget(EngineConfig(cpu_weights=cpu_weights), stored, pool, limit).component("weights").num_bytes

    assert planned_weights("auto") == cpu_weight_bytes(stored, dict(stored.quantized_matrices), 4)
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    assert cpu_weight_form("auto", "cpu", 1, stored) == "float"  # the kernel could not be built
    assert planned_weights("auto") == planned_weights("float") > planned_weights("int4")
