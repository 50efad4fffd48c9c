"""The overlapped engine loop (a step launched before the previous one's tokens are read) against the
synchronous loop on the CPU: the same streamed outputs for greedy and seeded sampling, with stop tokens, stop
strings, max_output_tokens, cancellations, preemption and the prefix cache, and a KV pool that returns to free.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from arbi_grpc.attention.selection import build_kv_cache
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.request import FinishReason, GenerationRequest
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.served_model import assemble_engine, build_runner
from benchmarks.gpu_decode import synthetic_tokenizer
from tests.unit.engine.stream_harness import (
    Outputs,
    assert_same_streams,
    run_requests,
    sampling_for,
    token_ids,
)
from tests.unit.engine.tiny_llama import tiny_llama_config

TINY_CONFIG = tiny_llama_config()
MAX_MODEL_LEN = 256


def _engine(overlap_steps: bool, num_blocks: int = 256, prefix_cache: bool = True) -> tuple[Engine, list[bool]]:
    """A stopped engine over a seeded tiny model, and a list that records, per launch, whether a token of the
    previous step was still in flight (the step overlapped); every launch checks that its sequences hold distinct
    batch slots."""
    engine_config = EngineConfig(device="cpu", max_model_len=MAX_MODEL_LEN, max_running_requests=8,
                                 max_step_tokens=48, max_prefill_chunk_tokens=16, block_size=4,
                                 enable_prefix_cache=prefix_cache, overlap_steps=overlap_steps)
    model = random_causal_lm(TINY_CONFIG, torch.float32, "cpu", seed=5)
    kv_cache = build_kv_cache(engine_config, TINY_CONFIG, num_blocks=num_blocks)
    runner, _ = build_runner(model, kv_cache, engine_config, MAX_MODEL_LEN, model.model.layers[0].self_attn.backend)
    engine = assemble_engine(runner, TINY_CONFIG, synthetic_tokenizer(TINY_CONFIG.vocab_size), engine_config,
                             MAX_MODEL_LEN)
    overlapped: list[bool] = []
    launch = runner.launch

    def recording_launch(step, previous):
        overlapped.append(previous is not None)
        batch_slots = [chunk.sequence.batch_slot for chunk in step.chunks]
        assert None not in batch_slots and len(set(batch_slots)) == len(batch_slots), batch_slots
        return launch(step, previous)

    runner.launch = recording_launch
    return engine, overlapped


def _prompts(count: int, seed: int, shared_prefix: int = 0) -> list[tuple[int, ...]]:
    generator = torch.Generator().manual_seed(seed)
    prefix = torch.randint(3, TINY_CONFIG.vocab_size, (shared_prefix,), generator=generator).tolist()
    lengths = torch.randint(1, 40, (count,), generator=generator).tolist()
    return [tuple(prefix + torch.randint(3, TINY_CONFIG.vocab_size, (n,), generator=generator).tolist())
            for n in lengths]


def _requests(prompts: list[tuple[int, ...]], tag: str, **stopping) -> list[GenerationRequest]:
    return [
        GenerationRequest(f"{tag}{i}", prompt, sampling_for(i),
                          StoppingParams(**{"max_output_tokens": 12 + 5 * (i % 4), **stopping}))
        for i, prompt in enumerate(prompts)
    ]


def _both_modes(make_requests, num_blocks: int = 256, prefix_cache: bool = True,
                cancel_after: dict[str, int] | None = None) -> tuple[Outputs, Outputs, list[bool], Engine]:
    runs = {}
    for overlap in (False, True):
        engine, overlapped = _engine(overlap, num_blocks, prefix_cache)
        runs[overlap] = (run_requests(engine, make_requests(), cancel_after), overlapped, engine)
    (sync, sync_launches, _), (overlap, overlap_launches, overlap_engine) = runs[False], runs[True]
    assert not any(sync_launches)
    return sync, overlap, overlap_launches, overlap_engine


def test_streams_equal_the_synchronous_loop_with_every_stop_condition() -> None:
    prompts = _prompts(10, seed=1)
    plain, plain_overlap, _, _ = _both_modes(lambda: _requests(prompts, "plain"))
    assert plain_overlap == plain  # max_output_tokens ends are known ahead: even the batches are the same
    # Stop conditions taken from the plain run, so that they fire mid-stream.
    texts = {rid: "".join(o.text for o in outs) for rid, outs in plain.items()}
    tokens = {rid: token_ids(outs) for rid, outs in plain.items()}

    def stopping_requests() -> list[GenerationRequest]:
        requests = []
        for i, request in enumerate(_requests(prompts, "plain")):
            text, ids = texts[request.request_id], tokens[request.request_id]
            if i % 3 == 0 and len(ids) > 6:
                stopping = replace(request.stopping, stop_token_ids=(ids[5],))
            elif i % 3 == 1 and len(text) > 20:
                stopping = replace(request.stopping, stop_strings=(text[12:17],))
            else:
                stopping = request.stopping
            requests.append(replace(request, stopping=stopping))
        return requests

    sync, overlap, overlapped, _ = _both_modes(stopping_requests)
    assert_same_streams(overlap, sync)
    reasons = {outs[-1].finish_reason for outs in sync.values()}
    assert reasons >= {FinishReason.STOP_TOKEN, FinishReason.STOP_STRING, FinishReason.MAX_OUTPUT_TOKENS}
    assert sum(overlapped) > len(overlapped) // 2  # most launches ran ahead of the host
    for outs in overlap.values():  # nothing streamed after the end
        assert outs[-1].finished and not any(o.finished for o in outs[:-1])


def test_cancellations_end_streams_at_the_same_token() -> None:
    prompts = _prompts(6, seed=2)
    cancel_after = {"c1": 3, "c2": 1, "c4": 7}
    sync, overlap, overlapped, _ = _both_modes(lambda: _requests(prompts, "c"), cancel_after=cancel_after)
    assert_same_streams(overlap, sync)
    for request_id, count in cancel_after.items():
        assert sync[request_id][-1].finish_reason is FinishReason.CANCELLED
        assert len(token_ids(sync[request_id])) == count
    assert any(overlapped)


def test_preemption_and_the_prefix_cache_give_the_same_outputs() -> None:
    # A pool of 40 four-token blocks for 8 running sequences of up to ~80 tokens: preemption is certain.
    prompts = _prompts(12, seed=3, shared_prefix=9)
    sync, overlap, overlapped, engine = _both_modes(lambda: _requests(prompts, "p", max_output_tokens=30),
                                                    num_blocks=40)
    assert_same_streams(overlap, sync)
    assert engine.stats().num_preemptions > 0
    assert any(o.cached_prompt_token_count for outs in sync.values() for o in outs)  # prefixes were reused
    assert any(overlapped)


def test_requests_that_need_host_history_read_each_step_first() -> None:
    """Penalties, min_output_tokens and prompt logprobs take the synchronous path; outputs stay equal."""
    prompts = _prompts(6, seed=4)

    def make() -> list[GenerationRequest]:
        requests = _requests(prompts, "h")
        requests[0] = replace(requests[0], sampling=replace(requests[0].sampling, repetition_penalty=1.3,
                                                            frequency_penalty=0.5))
        requests[1] = replace(requests[1], stopping=replace(requests[1].stopping, min_output_tokens=6,
                                                            stop_token_ids=(5, 7, 11)))
        requests[2] = replace(requests[2], sampling=replace(requests[2].sampling, prompt_logprobs=True))
        return requests

    sync, overlap, _, _ = _both_modes(make, prefix_cache=False)
    assert_same_streams(overlap, sync)
    assert sync["h2"][0].prompt_logprobs is not None


@pytest.mark.parametrize("overlap_steps", [False, True])
def test_a_sequence_ending_at_its_last_token_is_not_scheduled_again(overlap_steps: bool) -> None:
    engine, overlapped = _engine(overlap_steps)
    outputs = run_requests(engine, [GenerationRequest("one", (5, 6, 7), SamplingParams(temperature=0.0),
                                              StoppingParams(max_output_tokens=9, ignore_eos=True))])
    assert len(token_ids(outputs["one"])) == 9
    assert len(overlapped) == 9  # one prefill step and eight decodes; no tenth, discarded step
