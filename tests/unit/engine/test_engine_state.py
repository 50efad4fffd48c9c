"""Engine state only through the engine thread: `stats()` is the snapshot published before a request's end or a
call's result reaches its caller, and a KV storage swap is an engine call, refused (changing nothing) while a
request is in the engine or for a storage of another shape, and otherwise in force for the next request with the
prefix cache emptied; calls `after_step` leave a step between them while requests run."""

from __future__ import annotations

import threading

import pytest
import torch

from benchmarks.gpu_decode import synthetic_tokenizer
from arbi_grpc.attention.selection import build_kv_cache
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.engine import Engine, EngineStats
from arbi_grpc.engine.offline import generate
from arbi_grpc.engine.request import GenerationRequest, RequestOutput
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.errors import FailedPreconditionError, InvalidArgumentError
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.served_model import assemble_engine, build_runner
from tests.unit.engine.tiny_llama import tiny_llama_config

TINY_CONFIG = tiny_llama_config()
MAX_MODEL_LEN = 128
NUM_BLOCKS = 64
CONFIG = EngineConfig(device="cpu", max_model_len=MAX_MODEL_LEN, max_running_requests=4, max_step_tokens=64,
                      max_prefill_chunk_tokens=32, block_size=4, enable_prefix_cache=True)


def _engine() -> Engine:
    model = random_causal_lm(TINY_CONFIG, torch.float32, "cpu", seed=3)
    kv_cache = build_kv_cache(CONFIG, TINY_CONFIG, num_blocks=NUM_BLOCKS)
    runner, _ = build_runner(model, kv_cache, CONFIG, MAX_MODEL_LEN, model.model.layers[0].self_attn.backend)
    return assemble_engine(runner, TINY_CONFIG, synthetic_tokenizer(TINY_CONFIG.vocab_size), CONFIG, MAX_MODEL_LEN)


def _request(request_id: str, max_output_tokens: int = 6) -> GenerationRequest:
    prompt = tuple(range(5, 5 + 4 * 5))  # five blocks; with six output tokens the KV of six full blocks
    return GenerationRequest(request_id, prompt, SamplingParams(temperature=0.0),
                             StoppingParams(max_output_tokens=max_output_tokens, ignore_eos=True))


def test_the_stats_a_request_s_end_and_a_call_s_result_see_are_already_published() -> None:
    engine = _engine()
    seen_at_end: list[EngineStats] = []
    done = threading.Event()

    def sink(output: RequestOutput) -> None:
        if output.finished:
            seen_at_end.append(engine.stats())
            done.set()

    engine.start()
    try:
        engine.submit(_request("a"), sink)
        assert done.wait(timeout=120)
        at_end = seen_at_end[0]
        assert (at_end.num_running, at_end.num_waiting, at_end.num_free_blocks) == (0, 0, NUM_BLOCKS)
        assert at_end.num_cached_blocks == 6 and at_end.prefix_cache_query_tokens == 20
        assert engine.flush_prefix_cache().result(timeout=30) == 6
        assert engine.stats().num_cached_blocks == 0
    finally:
        engine.shutdown()


def test_a_kv_storage_swap_is_an_engine_call_refused_while_requests_run_or_for_another_shape() -> None:
    engine = _engine()
    engine.start()
    try:
        before = generate(engine, [_request("first")])[0].token_ids
        original = engine.kv_storage
        assert engine.stats().num_cached_blocks == 6

        engine.submit(_request("running", max_output_tokens=64), lambda output: None)
        refused = engine.replace_kv_storage(build_kv_cache(CONFIG, TINY_CONFIG, num_blocks=NUM_BLOCKS))
        with pytest.raises(FailedPreconditionError, match="requests are still in the engine"):
            refused.result(timeout=30)
        assert engine.cancel("running").result(timeout=30)
        cached = engine.stats().num_cached_blocks  # "running" may have indexed blocks of its own before its cancel
        assert engine.kv_storage is original and cached >= 6

        other_shape = engine.replace_kv_storage(build_kv_cache(CONFIG, TINY_CONFIG, num_blocks=NUM_BLOCKS // 2))
        with pytest.raises(InvalidArgumentError, match=f"num_blocks {NUM_BLOCKS // 2} \\(now {NUM_BLOCKS}\\)"):
            other_shape.result(timeout=30)
        assert engine.kv_storage is original and engine.stats().num_cached_blocks == cached

        replacement = build_kv_cache(CONFIG, TINY_CONFIG, num_blocks=NUM_BLOCKS)
        assert engine.replace_kv_storage(replacement).result(timeout=30) == cached  # the cached prefixes go
        assert engine.kv_storage is replacement and engine.stats().num_cached_blocks == 0
        hits_before = engine.stats().prefix_cache_hit_tokens
        assert generate(engine, [_request("again")])[0].token_ids == before
        assert engine.stats().prefix_cache_hit_tokens == hits_before  # recomputed into the new storage
        assert any(tensor.any() for tensor in replacement.key_caches)
    finally:
        engine.shutdown()


def test_calls_after_step_leave_a_step_between_them_while_requests_run() -> None:
    engine = _engine()
    tokens: list[int] = []
    engine.start()
    try:
        assert engine.call(lambda: "idle", after_step=True).result(timeout=30) == "idle"  # nothing runs: at once
        engine.submit(_request("running", max_output_tokens=48), lambda output: tokens.extend(output.tokens))
        while not tokens:
            threading.Event().wait(0.01)
        seen: dict[bool, list[int]] = {True: [], False: []}
        for after_step in (False, True):
            done: list = []

            def chain(left: int, after_step: bool = after_step, done: list = done) -> None:
                seen[after_step].append(len(tokens))
                if left:
                    engine.call(lambda: chain(left - 1), after_step=after_step)
                else:
                    done.append(True)

            engine.call(lambda: chain(3), after_step=after_step).result(timeout=30)
            while not done:
                threading.Event().wait(0.01)
        assert len(set(seen[False])) == 1  # plain calls posted from a call run in the same turn, stepless
        assert seen[True] == sorted(set(seen[True])) and len(seen[True]) == 4  # a step's tokens between each
        assert engine.cancel("running").result(timeout=30)
    finally:
        engine.shutdown()
