"""The TKV engine on CUDA (Triton write, prefill and split-K decode kernels, CUDA graphs) against the CPU TKV
engine (the torch reference backend) with the same weights and calibration.

Every token the GPU engine generated is re-scored by the CPU TKV engine (its prompt log-probabilities), so the
check is on numbers, not on tie-fragile greedy text. The GPU computes the dots in float16 tiles where the CPU
reference is float32, and a K/V value on a rounding boundary may take the neighbouring code on one of them:
hence a looser bound than the bf16 engine test's.
"""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.attention.selection import select_attention_backend
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.offline import generate
from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration
from arbi_grpc.kv_codec.spec import TkvSpec
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.models.reference_shapes import reference_hf_config
from tests.gpu.engine_pair import (
    build_engine,
    greedy_requests,
    on_device,
    rescore_on_cpu,
    worst_logprob_gap,
)

TOLERANCE = 0.05
"""Largest |GPU - CPU| logprob of a generated token (random weights give logprobs near -log(vocab))."""


def _shape(head_dim: int) -> ModelConfig:
    """SmolLM2's config cut to 4 layers, with head_dim 64 (SmolLM2's own) or 128 (Llama-3's, GQA 4)."""
    hf = reference_hf_config("smollm2-135m")
    hf.update(num_hidden_layers=4)
    if head_dim == 128:
        hf.update(hidden_size=1024, num_attention_heads=8, num_key_value_heads=2, intermediate_size=2048)
    return ModelConfig.from_hf_config(hf)


def _calibration(config: ModelConfig) -> TkvCalibration:
    """Uniform K4V4 everywhere except one K3V5 layer, with random channel scales and shifts."""
    uniform = TkvCalibration.uniform("random", TkvSpec(4, 4, 32, 1), config.num_layers, config.num_kv_heads,
                                     config.head_dim)
    generator = torch.Generator().manual_seed(5)
    shape = uniform.key_scales.shape
    return TkvCalibration(
        uniform.model_fingerprint, uniform.group_size, True, ((4, 4), (3, 5), (4, 4), (4, 4)),
        torch.exp(0.2 * torch.randn(shape, generator=generator)), torch.exp(0.2 * torch.randn(shape, generator=generator)),
        0.1 * torch.randn(shape, generator=generator), 0.1 * torch.randn(shape, generator=generator), "random",
        uniform.sink_tokens,
    )


@pytest.mark.parametrize("graph_batch", [0, 16])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gpu_tkv_generation_rescored_by_the_cpu_tkv_engine(head_dim: int, graph_batch: int) -> None:
    config = _shape(head_dim)
    calibration = _calibration(config)
    # One exact block: a prefix hit then changes no number, so the CPU's own schedule of hits re-scores what the
    # GPU generated. With a wider window a hit reads the window's reused blocks decoded (docs/tkv.md, "Exact
    # window"); test_tkv_exact_window_cuda.py compares that on both devices under the same schedule.
    common = dict(max_model_len=1024, max_running_requests=16, max_step_tokens=160, max_prefill_chunk_tokens=128,
                  enable_prefix_cache=True, kv_cache_memory_mib=256, kv_cache_dtype="tkv", kv_calibration="random",
                  kv_exact_blocks=1, kv_prefill_exact="window")  # chunk-free numbers: a prefill re-scores decodes
    cpu_config = EngineConfig(device="cpu", attention_backend="torch", **common)
    gpu_config = EngineConfig(device="cuda", dtype="float32", attention_backend="triton",
                              cuda_graph_max_batch=graph_batch, **common)
    cpu_model = random_causal_lm(config, torch.float32, "cpu", seed=3,
                                 attention_backend=select_attention_backend(cpu_config))
    cpu_engine = build_engine(cpu_model, config, cpu_config, calibration)
    gpu_engine = build_engine(on_device(cpu_model, config, gpu_config), config, gpu_config, calibration)
    try:
        generator = torch.Generator().manual_seed(11)
        shared = torch.randint(0, config.vocab_size, (40,), generator=generator).tolist()
        prompts = [shared + torch.randint(0, config.vocab_size, (n,), generator=generator).tolist()
                   for n in (1, 9, 16, 70, 300, 5, 130, 2)]  # ragged, a shared prefix, chunked prefill
        done = generate(gpu_engine, greedy_requests(prompts, 24))
        worst = worst_logprob_gap(done, rescore_on_cpu(cpu_engine, prompts, done))
        print(f"head_dim {head_dim} graphs {graph_batch}: worst generated-token logprob gap {worst:.4f}")
        assert worst < TOLERANCE, worst
        stats = gpu_engine.stats()
        assert stats.num_running == stats.num_waiting == 0
    finally:
        cpu_engine.shutdown()
        gpu_engine.shutdown()
