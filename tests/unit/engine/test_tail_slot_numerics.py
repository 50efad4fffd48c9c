"""Tail slots end to end on the CPU TKV engine: with two slots shared out in turn among many requests, through
overlapped steps, preemptions, prefix-cache hits and chunked prefills, every generated token's log-probability is
the one a single fresh prefill of the whole sequence gives (each query's own block read exact, never another
sequence's or a previous owner's rows)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from arbi_grpc.benchmarks.gpu_decode import synthetic_tokenizer
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.offline import generate
from arbi_grpc.engine.request import GenerationRequest
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.kv_codec import TkvCalibration, TkvSpec
from arbi_grpc.models.attention_selection import build_kv_cache, select_attention_backend
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.serving import assemble_engine, build_runner
from tests.unit.engine.tiny_llama import tiny_llama_config

TINY_CONFIG = tiny_llama_config()
MAX_MODEL_LEN = 128
TIGHT = EngineConfig(device="cpu", kv_cache_dtype="tkv", kv_calibration="uniform", attention_backend="torch",
                     max_model_len=MAX_MODEL_LEN, max_running_requests=2, max_step_tokens=24,
                     max_prefill_chunk_tokens=6, block_size=4, enable_prefix_cache=True)
# One sequence at a time, each rescored in one prefill step.
RESCORING = dataclasses.replace(TIGHT, max_running_requests=1, max_step_tokens=MAX_MODEL_LEN,
                                max_prefill_chunk_tokens=MAX_MODEL_LEN, enable_prefix_cache=False)


def _engine(config: EngineConfig, num_blocks: int) -> Engine:
    calibration = TkvCalibration.uniform("uniform", TkvSpec(4, 4, 8, 1), TINY_CONFIG.num_layers,
                                         TINY_CONFIG.num_kv_heads, TINY_CONFIG.head_dim)
    model = random_causal_lm(TINY_CONFIG, torch.float32, "cpu", seed=5,
                             attention_backend=select_attention_backend(config))
    kv_cache = build_kv_cache(config, TINY_CONFIG, num_blocks, calibration)
    runner, _ = build_runner(model, kv_cache, config, MAX_MODEL_LEN, model.model.layers[0].self_attn.backend)
    return assemble_engine(runner, TINY_CONFIG, synthetic_tokenizer(TINY_CONFIG.vocab_size), config, MAX_MODEL_LEN)


def _prompts() -> list[list[int]]:
    """Eight prompts; the even ones share a 10-token prefix (two whole blocks the prefix cache can serve)."""
    generator = torch.Generator().manual_seed(11)
    shared = torch.randint(3, TINY_CONFIG.vocab_size, (10,), generator=generator).tolist()
    own = [torch.randint(3, TINY_CONFIG.vocab_size, (n,), generator=generator).tolist()
           for n in (5, 13, 2, 18, 7, 1, 11, 9)]
    return [(shared if i % 2 == 0 else []) + tokens for i, tokens in enumerate(own)]


def _greedy(prompts: list[list[int]], max_output_tokens: int, prompt_logprobs: bool) -> list[GenerationRequest]:
    return [GenerationRequest(f"r{i}", tuple(prompt), SamplingParams(temperature=0.0, prompt_logprobs=prompt_logprobs),
                              StoppingParams(max_output_tokens=max_output_tokens, ignore_eos=True))
            for i, prompt in enumerate(prompts)]


@pytest.mark.parametrize("overlap_steps", [False, True])
def test_shared_out_slots_give_each_token_the_logprob_of_a_fresh_prefill(overlap_steps: bool) -> None:
    tight = _engine(dataclasses.replace(TIGHT, overlap_steps=overlap_steps), num_blocks=12)
    prompts = _prompts()
    tight.start()
    try:
        done = generate(tight, _greedy(prompts, 14, prompt_logprobs=False))
        stats = tight.stats()
    finally:
        tight.shutdown()
    assert stats.num_preemptions > 0 and stats.prefix_cache_hit_tokens > 0
    rescoring = _engine(RESCORING, num_blocks=64)
    rescoring.start()
    try:
        rescored = generate(rescoring, _greedy([p + r.token_ids for p, r in zip(prompts, done)], 1, True))
    finally:
        rescoring.shutdown()
    for prompt, generated, scored in zip(prompts, done, rescored):
        expected = torch.tensor(scored.prompt_logprobs[len(prompt):])
        torch.testing.assert_close(torch.tensor(generated.logprobs), expected, rtol=0, atol=1e-4)
