"""The CUDA estimate: every component in allocation order, CUDA graph batches that match the runner's,
a graph pool that follows the captured batches, and the torch backend's extra attention transients."""

from __future__ import annotations

import dataclasses

import pytest

from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.graph_batches import graph_batch_sizes
from arbi_grpc.memory.budget import MemoryLimit
from arbi_grpc.memory.cuda_estimate import (
    cuda_forward_bytes,
    cuda_graph_pool_bytes,
)
from arbi_grpc.memory.estimate import estimate_budget
from arbi_grpc.memory.kv_pool import plan_kv_pool
from arbi_grpc.models.reference_shapes import model_config_for_shape
from tests.unit.memory.shapes import model_config

LIMIT = MemoryLimit(1 << 40, "test")
CUDA_COMPONENTS = ("weights", "kv_cache", "codec_scratch", "activations", "cuda_graphs", "allocator_overhead")


def test_graph_batch_sizes() -> None:
    assert graph_batch_sizes(0) == ()
    assert graph_batch_sizes(1) == (1,)
    assert graph_batch_sizes(6) == (1, 2, 4, 6)
    assert graph_batch_sizes(20) == (1, 2, 4, 8, 16, 20)
    for max_batch in range(1, 300):
        sizes = graph_batch_sizes(max_batch)
        assert sizes[-1] == max_batch and list(sizes) == sorted(set(sizes)), max_batch
        assert all(b - a <= 8 for a, b in zip(sizes, sizes[1:])), max_batch


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_components_in_allocation_order(device: str) -> None:
    model = model_config_for_shape("qwen3-0.6b")
    config = EngineConfig(device=device, max_model_len=4096, kv_cache_memory_mib=1024)
    budget = estimate_budget(config, model, plan_kv_pool(config, model), LIMIT)
    names = tuple(component.name for component in budget.components)
    assert names == (CUDA_COMPONENTS if device == "cuda" else CUDA_COMPONENTS[:4])
    assert budget.component("codec_scratch").num_bytes == 0
    assert budget.total_bytes == sum(component.num_bytes for component in budget.components)


def test_graph_pool_follows_the_captured_batches() -> None:
    model = model_config_for_shape("llama3-8b")
    config = EngineConfig(device="cuda", max_running_requests=256, kv_cache_memory_mib=1024)
    off = dataclasses.replace(config, cuda_graph_max_batch=0)
    assert cuda_graph_pool_bytes(model, off) == 0
    pools = [cuda_graph_pool_bytes(model, dataclasses.replace(config, cuda_graph_max_batch=batch))
             for batch in (1, 8, 64, 256)]
    assert pools == sorted(pools) and len(set(pools)) == 4
    # Every captured graph keeps its float32 logits: 1 + 2 + 4 + 8 + 16 + ... + 256 rows for batches up to 256.
    assert pools[-1] >= sum(graph_batch_sizes(256)) * model.vocab_size * 4
    capped = dataclasses.replace(config, cuda_graph_max_batch=256, max_running_requests=64)
    assert capped.cuda_graph_batch == 64
    assert cuda_graph_pool_bytes(model, capped) == pools[2]


def test_only_the_torch_backend_gathers_context_and_builds_masks() -> None:
    model = model_config(intermediate_size=64)  # attention dominates the forward pass
    tokens = prompt = 512
    triton = cuda_forward_bytes(model, "bfloat16", tokens, prompt, "triton")
    torch_backend = cuda_forward_bytes(model, "bfloat16", tokens, prompt, "torch")
    kv_width = model.num_kv_heads * model.head_dim
    assert torch_backend - triton == 2 * prompt * kv_width * 2 + prompt * prompt * (1 + model.num_query_groups)
