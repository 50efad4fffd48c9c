"""Random-weight models: the decoder of the config with HF-initialised weights (seeded, in the requested dtype,
projections fused like a load), and real shapes that parse with their published parameter counts."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.attention.metadata import AttentionMetadata, token_positions
from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.memory.estimate import parameter_count
from arbi_grpc.memory.measure import tensor_bytes
from arbi_grpc.models.random_weights import INITIALIZER_STD, model_config_for_shape, random_causal_lm
from arbi_grpc.models.reference_shapes import REFERENCE_SHAPES
from tests.unit.memory.shapes import model_config


@pytest.mark.parametrize(("architecture", "tie", "dtype"), [
    ("LlamaForCausalLM", True, torch.float32), ("Qwen2ForCausalLM", False, torch.bfloat16),
    ("Qwen3ForCausalLM", False, torch.bfloat16),
])
def test_a_random_model_is_the_decoder_with_initialised_weights(architecture: str, tie: bool,
                                                                dtype: torch.dtype) -> None:
    config = model_config(architecture, tie=tie, hidden_size=256, intermediate_size=512)
    model = random_causal_lm(config, dtype, "cpu", seed=7)
    parameters = dict(model.named_parameters())
    assert sum(p.numel() for p in parameters.values()) == parameter_count(config)
    assert tensor_bytes(parameters.values()) == parameter_count(config) * dtype.itemsize
    assert {p.dtype for p in parameters.values()} == {dtype} and not any(p.requires_grad for p in parameters.values())
    for name, parameter in parameters.items():
        if name.endswith("norm.weight"):
            assert torch.all(parameter == 1), name
        elif name.endswith(".bias"):
            assert torch.all(parameter == 0), name
        else:
            assert abs(parameter.float().std().item() - INITIALIZER_STD) < 0.1 * INITIALIZER_STD, name
    assert model.projections_fused


def test_weights_follow_the_seed() -> None:
    config = model_config()
    first, again, other = (random_causal_lm(config, torch.float32, "cpu", seed) for seed in (1, 1, 2))
    weight = "model.layers.0.mlp.down_proj.weight"
    assert torch.equal(first.state_dict()[weight], again.state_dict()[weight])
    assert not torch.equal(first.state_dict()[weight], other.state_dict()[weight])


def test_a_random_model_runs_a_step() -> None:
    config = model_config()
    model = random_causal_lm(config, torch.float32, "cpu", seed=0)
    cache = PagedKVCache.for_model(config, num_blocks=4, block_size=16, dtype=torch.float32, device="cpu")
    metadata = AttentionMetadata.build(query_lens=[20], seq_lens=[20], block_tables=[[0, 1]], block_size=16,
                                       device=torch.device("cpu"))
    positions = token_positions(metadata.query_lens_host, metadata.seq_lens_host, torch.device("cpu"))
    with torch.inference_mode():
        logits = model.compute_logits(model(torch.arange(20), positions, metadata, cache))
    assert logits.shape == (20, config.vocab_size) and torch.isfinite(logits).all()
    assert 0.01 < logits.std().item() < 10  # a realistic scale: neither vanishing nor exploding


@pytest.mark.parametrize(("shape", "parameters"), [
    ("llama3-8b", 8_030_261_248), ("smollm2-135m", 134_515_008), ("qwen3-0.6b", 596_049_920),
    ("qwen3-8b", 8_190_735_360),
])
def test_real_shapes_have_their_published_sizes(shape: str, parameters: int) -> None:
    assert shape in REFERENCE_SHAPES
    assert parameter_count(model_config_for_shape(shape)) == parameters


def test_a_written_random_checkpoint_loads_as_the_same_model(tmp_path) -> None:
    from arbi_grpc.models.config import ModelConfig
    from arbi_grpc.models.loader import load_model
    from arbi_grpc.models.random_weights import write_random_checkpoint
    from arbi_grpc.models.reference_shapes import reference_hf_config

    hf_config = {**reference_hf_config("smollm2-135m"), "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
                 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    write_random_checkpoint(hf_config, tmp_path / "model", torch.float32, seed=5)
    loaded, loaded_config = load_model(tmp_path / "model")
    assert loaded_config == ModelConfig.from_hf_config(hf_config)
    expected = random_causal_lm(loaded_config, torch.float32, "cpu", seed=5).state_dict()
    assert loaded.state_dict().keys() == expected.keys()
    assert all(torch.equal(tensor, expected[name]) for name, tensor in loaded.state_dict().items())
