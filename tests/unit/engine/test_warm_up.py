"""The boot warm-up's eager steps: their layout (a fresh prompt, then mixed steps of a decode row beside a chunk after
a cached prefix, on blocks no other step shares), and that running them changes nothing a later request computes
(CPU TKV engine: the scratch blocks and both batch slots are then handed out to real requests)."""

from __future__ import annotations

import torch

from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.attention.selection import build_kv_cache, select_attention_backend
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.offline import generate
from arbi_grpc.engine.request import GenerationRequest
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.engine.warm_up import SHORT_DECODE_CONTEXT, WARM_UP_CHUNK, warm_up_steps
from arbi_grpc.kv_codec import TkvCalibration, TkvSpec
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.served_model import assemble_engine, build_runner
from benchmarks.gpu_decode import synthetic_tokenizer
from tests.unit.engine.tiny_llama import tiny_llama_config

CONFIG = tiny_llama_config()
MAX_MODEL_LEN = 96
ENGINE = EngineConfig(device="cpu", kv_cache_dtype="tkv", kv_calibration="uniform", attention_backend="torch",
                      max_model_len=MAX_MODEL_LEN, max_running_requests=2, max_step_tokens=24,
                      max_prefill_chunk_tokens=8, block_size=4, enable_prefix_cache=True)
CALIBRATION = TkvCalibration.uniform("uniform", TkvSpec(4, 4, 8, 1), CONFIG.num_layers, CONFIG.num_kv_heads,
                                     CONFIG.head_dim)


def test_steps_are_a_fresh_prompt_then_decodes_beside_a_chunk_after_a_prefix() -> None:
    kv_cache = PagedKVCache.for_model(CONFIG, num_blocks=600, block_size=4, dtype=torch.float32, device="cpu")
    fresh, long_mixed, short_mixed = warm_up_steps(kv_cache, max_model_len=4096)
    context = fresh.seq_lens[0]
    assert fresh.query_lens == fresh.seq_lens == [context] and fresh.logit_rows == [context - 1]
    assert long_mixed.query_lens == short_mixed.query_lens == [1, WARM_UP_CHUNK]
    assert long_mixed.seq_lens == [context + 1, context + WARM_UP_CHUNK]
    assert short_mixed.seq_lens == [SHORT_DECODE_CONTEXT, context + WARM_UP_CHUNK]
    assert long_mixed.logit_rows == [0, WARM_UP_CHUNK] and long_mixed.batch_slots == [0, 1]
    first, second = long_mixed.block_tables
    assert (first[0], second[0]) == (0, 1) and not set(first) & set(second)
    assert len(second) * 4 >= context + WARM_UP_CHUNK and max(first + second) < 600


def test_no_steps_where_the_pool_or_the_context_is_too_small() -> None:
    small = PagedKVCache.for_model(CONFIG, num_blocks=8, block_size=4, dtype=torch.float32, device="cpu")
    assert warm_up_steps(small, max_model_len=4096) == []
    large = PagedKVCache.for_model(CONFIG, num_blocks=600, block_size=4, dtype=torch.float32, device="cpu")
    assert warm_up_steps(large, max_model_len=WARM_UP_CHUNK + 8) == []


def _engine(num_blocks: int, warm_up: bool) -> Engine:
    model = random_causal_lm(CONFIG, torch.float32, "cpu", seed=5, attention_backend=select_attention_backend(ENGINE))
    kv_cache = build_kv_cache(ENGINE, CONFIG, num_blocks, CALIBRATION)
    runner, _ = build_runner(model, kv_cache, ENGINE, MAX_MODEL_LEN, model.model.layers[0].self_attn.backend)
    if warm_up:
        assert runner.warm_up_eager_steps(MAX_MODEL_LEN) == 3
    return assemble_engine(runner, CONFIG, synthetic_tokenizer(CONFIG.vocab_size), ENGINE, MAX_MODEL_LEN)


def _run(engine: Engine) -> list[tuple[list[int], list[float], list[float]]]:
    generator = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, CONFIG.vocab_size, (n,), generator=generator).tolist() for n in (30, 5, 19, 41)]
    requests = [GenerationRequest(f"r{i}", tuple(p), SamplingParams(temperature=0.0, prompt_logprobs=True),
                                  StoppingParams(max_output_tokens=12, ignore_eos=True))
                for i, p in enumerate(prompts)]
    engine.start()
    try:
        done = generate(engine, requests)
    finally:
        engine.shutdown()
    return [(r.token_ids, r.logprobs, r.prompt_logprobs[1:]) for r in done]


def test_a_warmed_up_engine_computes_what_a_fresh_one_does() -> None:
    """A pool of 40 blocks: the warm-up writes into most of them and both batch slots, which the requests then get
    (chunked prompts, decodes beside chunks, the prefix cache on)."""
    warmed, fresh = _run(_engine(40, warm_up=True)), _run(_engine(40, warm_up=False))
    for (tokens, logprobs, prompt), (fresh_tokens, fresh_logprobs, fresh_prompt) in zip(warmed, fresh):
        assert tokens == fresh_tokens
        torch.testing.assert_close(torch.tensor(logprobs), torch.tensor(fresh_logprobs), rtol=0, atol=1e-6)
        torch.testing.assert_close(torch.tensor(prompt), torch.tensor(fresh_prompt), rtol=0, atol=1e-6)

