"""The shard plan: which axis of each checkpoint tensor is split, that the ranks' parts put back together give
the tensor, the row-parallel bias held once, and the refusal of shapes that do not split."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.config import EngineConfig
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.parallel.shard_plan import (
    check_shardable,
    checkpoint_shape,
    per_rank_model_config,
    shard_tensor,
    split_axis,
)
from tests.unit.memory.shapes import model_config


@pytest.mark.parametrize(("name", "axis"), [
    ("model.embed_tokens.weight", 0), ("lm_head.weight", 0), ("model.layers.3.self_attn.q_proj.weight", 0),
    ("model.layers.3.self_attn.k_proj.bias", 0), ("model.layers.3.mlp.up_proj.weight", 0),
    ("model.layers.3.self_attn.o_proj.weight", 1), ("model.layers.3.mlp.down_proj.weight", 1),
    ("model.layers.3.input_layernorm.weight", None), ("model.layers.3.self_attn.q_norm.weight", None),
    ("model.norm.weight", None),
])
def test_each_tensor_splits_along_its_parallel_axis(name: str, axis: int | None) -> None:
    assert split_axis(name) == axis


@pytest.mark.parametrize("name", ["model.layers.0.self_attn.k_proj.weight", "model.layers.0.mlp.down_proj.weight",
                                  "model.norm.weight"])
def test_the_ranks_parts_make_the_tensor(name: str) -> None:
    whole = torch.randn(12, 8)
    parts = [shard_tensor(name, whole, rank, 4) for rank in range(4)]
    axis = split_axis(name)
    assert all(checkpoint_shape(name, tuple(part.shape), 4) == (12, 8) for part in parts)
    assert torch.equal(torch.cat(parts, dim=axis) if axis is not None else parts[3], whole)


def test_the_output_projection_bias_is_held_by_rank_zero_alone() -> None:
    bias = torch.randn(16)
    parts = [shard_tensor("model.layers.1.self_attn.o_proj.bias", bias, rank, 2) for rank in range(2)]
    assert torch.equal(parts[0], bias) and torch.equal(parts[1], torch.zeros(16))
    assert torch.equal(sum(parts), bias)


def test_a_shape_that_does_not_split_is_refused_with_its_numbers() -> None:
    config = model_config(num_attention_heads=12, num_key_value_heads=3, head_dim=16, intermediate_size=525,
                          vocab_size=1002)
    with pytest.raises(InvalidArgumentError) as refused:
        check_shardable(config, 2)
    assert refused.value.field == "tensor_parallel_size"
    assert "num_key_value_heads 3, intermediate_size 525 are not divisible by 2" in str(refused.value)
    rank = per_rank_model_config(config, 3)
    assert (rank.num_heads, rank.num_kv_heads, rank.vocab_size) == (4, 1, config.vocab_size)


def test_features_without_a_worker_side_are_refused_at_construction() -> None:
    with pytest.raises(NotImplementedError, match="--cuda-graph-max-batch 0"):
        EngineConfig(device="cuda", tensor_parallel_size=2)
    with pytest.raises(NotImplementedError, match="--kv-cache-dtype tkv"):
        EngineConfig(tensor_parallel_size=2, kv_cache_dtype="tkv", kv_calibration="bundle")
    with pytest.raises(InvalidArgumentError, match="tensor_parallel_size: must be >= 1"):
        EngineConfig(tensor_parallel_size=0)
    assert EngineConfig(device="cuda", tensor_parallel_size=2, cuda_graph_max_batch=0).tensor_parallel_size == 2
