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

from arbi_grpc.benchmarks.gpu_decode import synthetic_tokenizer
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.offline import generate
from arbi_grpc.engine.request import GenerationRequest
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.kv_codec.calibration import TkvCalibration
from arbi_grpc.kv_codec.spec import TkvSpec
from arbi_grpc.models.attention_selection import (
    TORCH_DTYPES,
    build_kv_cache,
    select_attention_backend,
)
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.decoder import CausalLM
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.models.reference_shapes import reference_hf_config
from arbi_grpc.serving import assemble_engine, build_runner

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


def _engine(model: CausalLM, config: ModelConfig, engine_config: EngineConfig, calibration: TkvCalibration):
    kv_cache = build_kv_cache(engine_config, config, num_blocks=256, tkv_calibration=calibration)
    runner, _ = build_runner(model, kv_cache, engine_config, engine_config.max_model_len,
                             model.model.layers[0].self_attn.backend)
    engine = assemble_engine(runner, config, synthetic_tokenizer(config.vocab_size), engine_config,
                             engine_config.max_model_len)
    engine.start()
    return engine


def _requests(prompts: list[list[int]], new_tokens: int, prompt_logprobs: bool = False) -> list[GenerationRequest]:
    return [
        GenerationRequest(f"r{i}", tuple(prompt), SamplingParams(temperature=0.0, prompt_logprobs=prompt_logprobs),
                          StoppingParams(max_output_tokens=new_tokens, ignore_eos=True))
        for i, prompt in enumerate(prompts)
    ]


@pytest.mark.parametrize("graph_batch", [0, 16])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gpu_tkv_generation_rescored_by_the_cpu_tkv_engine(head_dim: int, graph_batch: int) -> None:
    config = _shape(head_dim)
    calibration = _calibration(config)
    common = dict(max_model_len=1024, max_running_requests=16, max_step_tokens=160, max_prefill_chunk_tokens=128,
                  enable_prefix_cache=True, kv_cache_memory_mib=256, kv_cache_dtype="tkv", kv_calibration="random")
    cpu_config = EngineConfig(device="cpu", attention_backend="torch", **common)
    gpu_config = EngineConfig(device="cuda", dtype="float32", attention_backend="triton",
                              cuda_graph_max_batch=graph_batch, **common)
    cpu_model = random_causal_lm(config, torch.float32, "cpu", seed=3,
                                 attention_backend=select_attention_backend(cpu_config))
    with torch.device("meta"):
        gpu_model = CausalLM(config, attention_backend=select_attention_backend(gpu_config), device="cuda")
    gpu_model.load_state_dict({name: t.to("cuda", TORCH_DTYPES[gpu_config.dtype])
                               for name, t in cpu_model.state_dict().items()}, strict=True, assign=True)
    gpu_model.fuse_projections()
    cpu_engine = _engine(cpu_model, config, cpu_config, calibration)
    gpu_engine = _engine(gpu_model.eval(), config, gpu_config, calibration)
    try:
        generator = torch.Generator().manual_seed(11)
        shared = torch.randint(0, config.vocab_size, (40,), generator=generator).tolist()
        prompts = [shared + torch.randint(0, config.vocab_size, (n,), generator=generator).tolist()
                   for n in (1, 9, 16, 70, 300, 5, 130, 2)]  # ragged, a shared prefix, chunked prefill
        done = generate(gpu_engine, _requests(prompts, 24))
        rescored = generate(cpu_engine, _requests([p + r.token_ids for p, r in zip(prompts, done)], 1, True))
        worst = max(abs(g - c) for p, r, s in zip(prompts, done, rescored)
                    for g, c in zip(r.logprobs, s.prompt_logprobs[len(p):]))
        print(f"head_dim {head_dim} graphs {graph_batch}: worst generated-token logprob gap {worst:.4f}")
        assert worst < TOLERANCE, worst
        stats = gpu_engine.stats()
        assert stats.num_running == stats.num_waiting == 0
    finally:
        cpu_engine.shutdown()
        gpu_engine.shutdown()
