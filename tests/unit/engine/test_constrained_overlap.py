"""Constrained steps in the overlapped engine loop, on the CPU with a tiny random model (word-level vocabulary
`t0 .. t95`, EOS 2): a step that samples a constrained row queues its forward pass, then the host reads the step
before it, fills the masks and queues the sampling, before the next forward pass; a step without one queues its
sampling with its forward pass; the step after a constrained one still overlaps. Outputs equal the
synchronous loop's beside unconstrained requests, with seeded sampling, stop strings, min_output_tokens, EOS,
preemption and the prefix cache, every constrained output matches its grammar, and `StepTimings` records the fill
of each constrained step."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch

from arbi_grpc.attention.selection import build_kv_cache
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.grammar.compile_cache import CompileCache
from arbi_grpc.engine.grammar.compiler import ConstraintCompiler
from arbi_grpc.engine.grammar.vocabulary import build_vocabulary
from arbi_grpc.engine.output_constraint import ConstraintKind, OutputConstraint
from arbi_grpc.engine.request import FinishReason, GenerationRequest
from arbi_grpc.engine.sampling_params import StoppingParams
from arbi_grpc.engine.step_timings import StepTimings
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.served_model import assemble_engine, build_runner
from benchmarks.gpu_decode import synthetic_tokenizer
from tests.unit.engine.stream_harness import assert_same_streams, run_requests, sampling_for, token_ids
from tests.unit.engine.tiny_llama import tiny_llama_config

TINY_CONFIG = tiny_llama_config()
MAX_MODEL_LEN = 256
EOS = 2
TOKENIZER = synthetic_tokenizer(TINY_CONFIG.vocab_size)
VOCABULARY = build_vocabulary(TOKENIZER, TINY_CONFIG.vocab_size, [EOS])
REGEX = "(t3|t4|t5|t6)(t7|t8|t9|t3){6,14}"
CHOICES = ("t5t6t7t8t9", "t9t9", "t3t8t4")
CONSTRAINTS = (OutputConstraint(ConstraintKind.REGEX, REGEX), OutputConstraint(ConstraintKind.CHOICE, choices=CHOICES))
CACHE = CompileCache(VOCABULARY.info, None)  # shared: both loops' first schedules see every grammar compiled


@pytest.fixture(scope="module", autouse=True)
def _compiled() -> None:
    compiler = ConstraintCompiler(VOCABULARY, CACHE, 10_000)
    try:
        for constraint in CONSTRAINTS:
            compiler.compile(constraint).result()
    finally:
        compiler.close()


def _engine(overlap_steps: bool, num_blocks: int) -> tuple[Engine, list[tuple[str, object]], StepTimings]:
    """A stopped engine whose runner records its calls in order: ("launch", step) once a launch returned,
    ("fill", step), ("sample", step) and ("read", step); each launched step's `previous` is kept on it."""
    config = EngineConfig(device="cpu", max_model_len=MAX_MODEL_LEN, max_running_requests=8, max_step_tokens=48,
                          max_prefill_chunk_tokens=16, block_size=4, overlap_steps=overlap_steps)
    model = random_causal_lm(TINY_CONFIG, torch.float32, "cpu", seed=5)
    kv_cache = build_kv_cache(config, TINY_CONFIG, num_blocks=num_blocks)
    runner, _ = build_runner(model, kv_cache, config, MAX_MODEL_LEN, model.model.layers[0].self_attn.backend)
    grammars = ConstraintCompiler(VOCABULARY, CACHE, 10_000)
    engine = assemble_engine(runner, TINY_CONFIG, TOKENIZER, config, MAX_MODEL_LEN, grammars=grammars)
    calls: list[tuple[str, object]] = []
    launch, fill_masks, queue_sampling = runner.launch, runner.fill_masks, runner.queue_sampling

    def recording_launch(step, previous):
        launched = launch(step, previous)
        launched.previous_for_test = previous
        result = launched.result

        def recording_result():
            calls.append(("read", launched))
            return result()

        launched.result = recording_result
        calls.append(("launch", launched))
        return launched

    def recording_fill(launched):
        calls.append(("fill", launched))
        fill_masks(launched)

    def recording_queue(launched):
        calls.append(("sample", launched))
        queue_sampling(launched)

    runner.launch, runner.fill_masks, runner.queue_sampling = recording_launch, recording_fill, recording_queue
    runner.timings = StepTimings()
    return engine, calls, runner.timings


def _requests() -> list[GenerationRequest]:
    """12 requests: every third one a regex, every third a choice, the rest unconstrained; seeded sampling on odd
    ones; a stop string, min_output_tokens and EOS on some."""
    requests = []
    generator = torch.Generator().manual_seed(7)
    for i in range(12):
        prompt = tuple(torch.randint(10, TINY_CONFIG.vocab_size, (3 + 5 * (i % 4),), generator=generator).tolist())
        sampling = sampling_for(i)
        stopping = StoppingParams(max_output_tokens=20, ignore_eos=i % 3 == 2)
        if i % 3 < 2:
            sampling = replace(sampling, output_constraint=CONSTRAINTS[i % 3])
        if i % 4 == 1:
            stopping = replace(stopping, min_output_tokens=4)
        if i == 5:
            stopping = replace(stopping, stop_strings=("t4t",))
        requests.append(GenerationRequest(f"r{i}", prompt, sampling, stopping))
    return requests


def _text(token_list: list[int]) -> str:
    return "".join(f"t{token_id}" for token_id in token_list)


@pytest.mark.parametrize("num_blocks", [256, 40])  # 40 four-token blocks for 8 running sequences: preemption
def test_constrained_steps_hide_their_masks_and_equal_the_synchronous_loop(num_blocks: int) -> None:
    runs = {}
    for overlap in (False, True):
        engine, calls, timings = _engine(overlap, num_blocks)
        runs[overlap] = (run_requests(engine, _requests()), calls, timings, engine)
    (sync, _, _, _), (overlap, calls, timings, engine) = runs[False], runs[True]
    assert_same_streams(overlap, sync)
    if num_blocks == 40:
        assert engine.stats().num_preemptions > 0
    for request in _requests():
        outputs = overlap[request.request_id]
        ids = token_ids(outputs)
        constraint = request.sampling.output_constraint
        if constraint is not None:
            assert outputs[-1].finish_reason is FinishReason.EOS_TOKEN and ids[-1] == EOS, request.request_id
            text = _text(ids[:-1])
            assert re.fullmatch(REGEX, text) if constraint.kind is ConstraintKind.REGEX else text in CHOICES
        elif request.stopping.min_output_tokens:  # a grammar that can only end wins over the ban
            assert len(ids) >= request.stopping.min_output_tokens

    order = {(name, id(step)): index for index, (name, step) in enumerate(calls)}
    launches = [(index, step) for index, (name, step) in enumerate(calls) if name == "launch"]
    overlapped_after_constrained = 0
    for position, (index, launched) in enumerate(launches):
        if not launched.sequences:
            continue  # mid-prompt chunks only: nothing sampled
        sample = order[("sample", id(launched))]
        constrained = any(sequence.request.sampling.output_constraint for sequence in launched.sequences)
        if not constrained:
            assert sample < index and ("fill", id(launched)) not in order  # queued inside its launch
            continue
        fill = order[("fill", id(launched))]
        previous = launched.previous_for_test
        assert index < fill < sample
        if previous is not None:
            assert order[("read", id(previous))] < fill  # the step before was read before the masks were filled
        if position + 1 < len(launches):
            next_index, next_launched = launches[position + 1]
            assert sample < next_index
            overlapped_after_constrained += next_launched.previous_for_test is launched
    assert overlapped_after_constrained > 0

    steps = timings.take()
    assert steps and all(not step.events and step.device_ms() is None for step in steps)  # no device events on CPU
    assert all((step.fill_s > 0) == (step.constrained_rows > 0) and step.queue_s > 0 for step in steps)
    assert any(step.constrained_rows for step in steps) and any(step.rows > step.constrained_rows for step in steps)
