"""A TKV engine whose pool gives only 3 of its 40 blocks a sink row: more sequences than that run through prefix
cache hits, evictions and waits for a sink-capable first block, and generate what an engine whose every block has
a sink row generates."""

from __future__ import annotations

import torch

from arbi_grpc.attention.selection import select_attention_backend
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.request import GenerationRequest
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.kv_codec import TkvCalibration, TkvSpec
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.served_model import assemble_engine, build_runner
from benchmarks.gpu_decode import synthetic_tokenizer
from tests.unit.engine.stream_harness import run_requests, token_ids
from tests.unit.engine.tiny_llama import tiny_llama_config

TINY_CONFIG = tiny_llama_config()
MAX_MODEL_LEN = 128
ENGINE_CONFIG = EngineConfig(device="cpu", kv_cache_dtype="tkv", kv_calibration="random", attention_backend="torch",
                             max_model_len=MAX_MODEL_LEN, max_running_requests=6, max_step_tokens=48,
                             max_prefill_chunk_tokens=16, block_size=4, enable_prefix_cache=True)


def _calibration() -> TkvCalibration:
    uniform = TkvCalibration.uniform("random", TkvSpec(4, 4, 8, 1), TINY_CONFIG.num_layers,
                                     TINY_CONFIG.num_kv_heads, TINY_CONFIG.head_dim)
    generator = torch.Generator().manual_seed(3)
    shape = uniform.key_scales.shape
    return TkvCalibration(
        uniform.model_fingerprint, uniform.group_size, True, uniform.layer_bits,
        *(torch.exp(0.2 * torch.randn(shape, generator=generator)) for _ in range(2)),
        *(0.1 * torch.randn(shape, generator=generator) for _ in range(2)), "random", uniform.sink_tokens,
    )


def _engine(num_blocks: int, num_sink_blocks: int | None) -> Engine:
    model = random_causal_lm(TINY_CONFIG, torch.float32, "cpu", seed=5,
                             attention_backend=select_attention_backend(ENGINE_CONFIG))
    kv_cache = TkvPagedKVCache(_calibration(), num_blocks=num_blocks, block_size=ENGINE_CONFIG.block_size,
                               device="cpu", num_sink_blocks=num_sink_blocks,
                               num_tail_slots=ENGINE_CONFIG.max_running_requests)
    runner, _ = build_runner(model, kv_cache, ENGINE_CONFIG, MAX_MODEL_LEN, model.model.layers[0].self_attn.backend)
    return assemble_engine(runner, TINY_CONFIG, synthetic_tokenizer(TINY_CONFIG.vocab_size), ENGINE_CONFIG,
                           MAX_MODEL_LEN)


def _requests() -> list[GenerationRequest]:
    """Ten prompts: the even ones share a 9-token prefix (two whole blocks, one sink row between them once
    cached), the odd ones start on their own."""
    generator = torch.Generator().manual_seed(9)
    shared = torch.randint(3, TINY_CONFIG.vocab_size, (9,), generator=generator).tolist()
    own = [torch.randint(3, TINY_CONFIG.vocab_size, (n,), generator=generator).tolist()
           for n in (3, 12, 1, 20, 6, 2, 15, 9, 4, 11)]
    prompts = [(shared if i % 2 == 0 else []) + tokens for i, tokens in enumerate(own)]
    return [GenerationRequest(f"r{i}", tuple(prompt), SamplingParams(temperature=0.0),
                              StoppingParams(max_output_tokens=8, ignore_eos=True))
            for i, prompt in enumerate(prompts)]


def test_few_sink_rows_serve_many_sequences_like_a_pool_where_every_block_has_one() -> None:
    tight = _engine(num_blocks=40, num_sink_blocks=3)
    roomy = _engine(num_blocks=256, num_sink_blocks=None)
    assert tight.runner.kv_cache.layer(0).key_sink.shape[0] == 3
    waits_for_a_start = []  # steps that left sequences waiting with many blocks free but no sink-capable one
    schedule = tight.scheduler.schedule

    def recording_schedule():
        step = schedule()
        kv = tight.scheduler.block_manager
        waits_for_a_start.append(bool(tight.scheduler.waiting) and kv.num_free_blocks > 10
                                 and not kv.can_start_sequence())
        return step

    tight.scheduler.schedule = recording_schedule
    got = run_requests(tight, _requests())  # also checks that the pool returns to free
    expected = run_requests(roomy, _requests())
    assert {r: token_ids(o) for r, o in got.items()} == {r: token_ids(o) for r, o in expected.items()}
    stats = tight.stats()
    assert any(waits_for_a_start) and stats.prefix_cache_hit_tokens > 0 and stats.num_evictions > 0
