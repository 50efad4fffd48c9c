"""The estimate without weights: parameter counts are exact for every architecture, and the activation
estimate tracks the profiled peak of real (random-weight) models."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.attention.torch_paged import TorchPagedAttention
from arbi_grpc.memory.activation_profile import measure_activation_peak
from arbi_grpc.memory.estimate import activation_bytes, parameter_count
from arbi_grpc.memory.profile_step import ProfileStep
from arbi_grpc.models.decoder import CausalLM
from tests.unit.memory.shapes import model_config

ARCHITECTURE_CASES = [
    ("LlamaForCausalLM", True, {}),
    ("LlamaForCausalLM", False, {"attention_bias": True}),
    ("Qwen2ForCausalLM", False, {}),
    ("Qwen3ForCausalLM", True, {"head_dim": 32}),
]


@pytest.mark.parametrize(("architecture", "tie", "overrides"), ARCHITECTURE_CASES)
def test_parameter_count_matches_the_built_decoder(architecture: str, tie: bool, overrides: dict) -> None:
    config = model_config(architecture, tie=tie, **overrides)
    with torch.device("meta"):
        model = CausalLM(config, attention_backend=TorchPagedAttention(), device="meta")
    assert parameter_count(config) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("dtype", "step_args", "shape"), [
    ("float32", (64, 512, 8), {}),  # logits and the sampler dominate
    ("float32", (48, 512, 1), {}),  # one sampled row: the logits dominate
    ("bfloat16", (64, 512, 2), {}),  # the bfloat16 logits before their float32 cast
    ("float32", (512, 512, 1), {"vocab_size": 512}),  # a long prompt: attention masks dominate
    ("float32", (256, 256, 1), {"vocab_size": 256, "intermediate_size": 1024}),  # the MLP dominates
])
def test_activation_estimate_tracks_the_profile(dtype: str, step_args: tuple[int, int, int], shape: dict) -> None:
    config = model_config(**{"vocab_size": 4096, "hidden_size": 128, "intermediate_size": 384, **shape})
    torch.manual_seed(0)
    model = CausalLM(config, attention_backend=TorchPagedAttention(), device="cpu").to(getattr(torch, dtype)).eval()
    model.fuse_projections()
    cache = PagedKVCache.for_model(config, num_blocks=40, block_size=16, dtype=getattr(torch, dtype), device="cpu")
    step = ProfileStep.worst_case(*step_args)
    measured = measure_activation_peak(model, cache, step)
    estimated = activation_bytes(config, dtype, step)
    assert abs(estimated - measured) <= 0.10 * measured, (estimated, measured)
