"""`--cpu-weights int4`: the bytes `plan` counts (`quantized_layout.cpu_weight_bytes` with the stored kinds) equal
what the loaded SmolLM2 decoder holds: every layer matmul, the logits and the embedding lookup on its stored
Q4_1 / Q8_0 blocks (`BlockLinear`, the tied table held once), no float copy of the table."""

from __future__ import annotations

from pathlib import Path

from arbi_grpc.memory.measure import tensor_bytes
from arbi_grpc.models.block_linear import BlockEmbedding, BlockLinear
from arbi_grpc.models.loader import load_model
from arbi_grpc.models.quantized_layout import cpu_weight_bytes, with_stored_quantization


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
