"""Tail slots end to end on the CPU TKV engine: with two slots shared out in turn among many requests, through
overlapped steps, preemptions, prefix-cache hits and chunked prefills, every generated token's log-probability is
the one a single fresh prefill of the whole sequence gives (each query's exact window, of one block or two, read
exact, never another sequence's or a previous owner's rows); and a prefix hit with a two-block window reads the
reused block in its window as the decoded values the engine seeded into its tail slot.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from arbi_grpc.attention.selection import build_kv_cache, select_attention_backend
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.offline import generate
from arbi_grpc.engine.request import GenerationRequest
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.kv_codec import TkvCalibration, TkvSpec
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.served_model import assemble_engine, build_runner
from benchmarks.gpu_decode import synthetic_tokenizer
from tests.unit.engine.tiny_llama import tiny_llama_config
from tests.unit.models.paged_harness import PagedStepRunner

TINY_CONFIG = tiny_llama_config()
MAX_MODEL_LEN = 128
TIGHT = EngineConfig(device="cpu", kv_cache_dtype="tkv", kv_calibration="uniform", attention_backend="torch",
                     max_model_len=MAX_MODEL_LEN, max_running_requests=2, max_step_tokens=24,
                     max_prefill_chunk_tokens=6, block_size=4, enable_prefix_cache=True,
                     kv_prefill_exact="window")  # chunk-free numbers, so that one prefill re-scores every decode
# One sequence at a time, each rescored in one prefill step.
RESCORING = dataclasses.replace(TIGHT, max_running_requests=1, max_step_tokens=MAX_MODEL_LEN,
                                max_prefill_chunk_tokens=MAX_MODEL_LEN, enable_prefix_cache=False)


CALIBRATION = TkvCalibration.uniform("uniform", TkvSpec(4, 4, 8, 1), TINY_CONFIG.num_layers, TINY_CONFIG.num_kv_heads,
                                    TINY_CONFIG.head_dim)


def _engine(config: EngineConfig, num_blocks: int) -> Engine:
    model = random_causal_lm(TINY_CONFIG, torch.float32, "cpu", seed=5,
                             attention_backend=select_attention_backend(config))
    kv_cache = build_kv_cache(config, TINY_CONFIG, num_blocks, CALIBRATION)
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
@pytest.mark.parametrize("exact_blocks,enable_prefix_cache", [(1, True), (2, False)])
def test_shared_out_slots_give_each_token_the_logprob_of_a_fresh_prefill(
    overlap_steps: bool, exact_blocks: int, enable_prefix_cache: bool
) -> None:
    """With a window of two blocks a prefix hit reads decoded values where a fresh prefill reads exact ones (the
    next test), so that case runs without the prefix cache."""
    tight = _engine(dataclasses.replace(TIGHT, overlap_steps=overlap_steps, kv_exact_blocks=exact_blocks,
                                        enable_prefix_cache=enable_prefix_cache), num_blocks=12)
    prompts = _prompts()
    tight.start()
    try:
        done = generate(tight, _greedy(prompts, 14, prompt_logprobs=False))
        stats = tight.stats()
    finally:
        tight.shutdown()
    assert stats.num_preemptions > 0 and (stats.prefix_cache_hit_tokens > 0) == enable_prefix_cache
    rescoring = _engine(dataclasses.replace(RESCORING, kv_exact_blocks=exact_blocks), num_blocks=64)
    rescoring.start()
    try:
        rescored = generate(rescoring, _greedy([p + r.token_ids for p, r in zip(prompts, done)], 1, True))
    finally:
        rescoring.shutdown()
    for prompt, generated, scored in zip(prompts, done, rescored):
        expected = torch.tensor(scored.prompt_logprobs[len(prompt):])
        torch.testing.assert_close(torch.tensor(generated.logprobs), expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize("overlap_steps", [False, True])
def test_a_prefix_hit_reads_the_reused_block_in_its_window_decoded(overlap_steps: bool) -> None:
    """The second request reuses the first one's two leading blocks (8 of their 10 shared tokens); with a window of
    two blocks its first query (block 2) reads block 1 exactly from its tail slot, which the engine seeded with that
    block's decoded values. The reference plays the same on the model by hand: block 0 and 1 prefilled in another
    slot, block 1 seeded, the rest in one prefill."""
    config = dataclasses.replace(TIGHT, overlap_steps=overlap_steps, kv_exact_blocks=2, max_step_tokens=MAX_MODEL_LEN,
                                 max_prefill_chunk_tokens=MAX_MODEL_LEN)
    engine = _engine(config, num_blocks=32)
    prompts = _prompts()
    first, second = _greedy([prompts[0], prompts[2]], 6, prompt_logprobs=False)
    engine.start()
    try:
        generate(engine, [first])
        done = generate(engine, [second])[0]
        stats = engine.stats()
    finally:
        engine.shutdown()
    reused = 8
    assert stats.prefix_cache_hit_tokens == reused and stats.num_preemptions == 0
    tokens = list(second.prompt_token_ids) + done.token_ids
    model = engine.runner.model
    kv_cache = TkvPagedKVCache(CALIBRATION, num_blocks=16, block_size=4, device="cpu", num_tail_slots=2,
                               exact_blocks=2, chunk_exact=False)  # every block with a sink row: the runner hands
    # out any first block
    runner = PagedStepRunner(block_size=4, num_blocks=16, rng=random.Random(3))
    runner.run_model(model, kv_cache, {0: tokens[:reused]}, [[(0, reused)]])
    runner.block_tables[1], runner.processed[1] = runner.block_tables[0][:2], reused
    kv_cache.seed_tail(1, torch.tensor(runner.block_tables[1][1:]), first_block_index=1)
    logits = runner.run_model(model, kv_cache, {1: tokens}, [[(1, len(tokens) - 1 - reused)]])[1]
    logprobs = torch.log_softmax(logits.float(), dim=-1)  # row r: position reused + r predicts token reused + r + 1
    prompt_len = len(second.prompt_token_ids)
    expected = [logprobs[position - 1 - reused, tokens[position]].item() for position in range(prompt_len, len(tokens))]
    torch.testing.assert_close(torch.tensor(done.logprobs), torch.tensor(expected), rtol=0, atol=1e-4)
