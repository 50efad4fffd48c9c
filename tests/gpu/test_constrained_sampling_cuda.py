"""Output-constraint masks on CUDA: applied to CUDA logits they equal the CPU application; filling them and queueing
the masked sampling never makes the host wait for the device (the sampling is queued behind a long device sleep that
is still running when the queueing returns, under torch's sync debug mode "error"); and an engine with CUDA graphs
and overlapped steps serves constrained requests beside unconstrained ones with every launch, fill and sampling
queue under the same debug mode."""

from __future__ import annotations

import re

import pytest
import torch

from arbi_grpc.attention.selection import build_kv_cache
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.grammar.compile_cache import CompileCache
from arbi_grpc.engine.grammar.compiler import ConstraintCompiler
from arbi_grpc.engine.grammar.token_masks import TokenMaskBuilder
from arbi_grpc.engine.grammar.vocabulary import build_vocabulary
from arbi_grpc.engine.model_runner import ModelRunner
from arbi_grpc.engine.offline import generate
from arbi_grpc.engine.output_constraint import ConstraintKind, OutputConstraint
from arbi_grpc.engine.request import FinishReason, GenerationRequest
from arbi_grpc.engine.sampler import Sampler, SamplingState
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.models.reference_shapes import model_config_for_shape
from arbi_grpc.served_model import assemble_engine, build_runner
from benchmarks.gpu_decode import synthetic_tokenizer

VOCAB_SIZE = 96
EOS = 2
REGEX = "(t3|t4|t5|t6)(t7|t8|t9|t3){6,14}"
SLEEP_CYCLES = 4_000_000_000  # about two seconds of device time at H200 clocks


def _grammars(vocab_size: int, rows: int) -> tuple[ConstraintCompiler, list]:
    tokenizer = synthetic_tokenizer(vocab_size)
    vocabulary = build_vocabulary(tokenizer, vocab_size, [EOS])
    compiler = ConstraintCompiler(vocabulary, CompileCache(vocabulary.info, None), 10_000)
    compiled = compiler.compile(OutputConstraint(ConstraintKind.REGEX, REGEX)).result()
    grammars = []
    for row in range(rows):
        grammar = None if row % 3 == 1 else compiler.matcher(compiled)
        if grammar is not None:
            grammar.advance([3, 7, 8][: row % 4], 0)
        grammars.append(grammar)
    return compiler, grammars


def _states(rows: int) -> list[SamplingState]:
    return [SamplingState(SamplingParams(temperature=0.0), StoppingParams(max_output_tokens=16), (), frozenset([EOS]))
            for _ in range(rows)]


@pytest.mark.parametrize("rows", [3, 40])  # one matcher at a time, and xgrammar's batch fill
def test_masks_on_cuda_equal_the_cpu_masks(rows: int, generator: torch.Generator) -> None:
    compiler, grammars = _grammars(VOCAB_SIZE, rows)
    try:
        masks = TokenMaskBuilder(VOCAB_SIZE, [EOS]).build(grammars, _states(rows), torch.device("cuda"))
        assert masks.bitmask.is_pinned() and masks.rows == [row for row in range(rows) if row % 3 != 1]
        logits = torch.randn(rows, VOCAB_SIZE, device="cuda", generator=generator)
        on_cpu = logits.cpu()
        masks.apply(logits)
        masks.apply(on_cpu)
        assert torch.equal(logits.cpu(), on_cpu)
        assert torch.isinf(on_cpu[masks.rows]).any() and not torch.isinf(on_cpu[1]).any()
    finally:
        compiler.close()


def test_masked_sampling_is_queued_without_waiting_for_the_device(generator: torch.Generator) -> None:
    rows = 12
    compiler, grammars = _grammars(VOCAB_SIZE, rows)
    builder, sampler, states = TokenMaskBuilder(VOCAB_SIZE, [EOS]), Sampler(unseeded_seed=0), _states(rows)
    logits = torch.randn(rows, VOCAB_SIZE, device="cuda", generator=generator)
    try:
        sampler.sample_without_sync(logits, states, builder.build(grammars, states, torch.device("cuda"))).result()
        torch.cuda._sleep(SLEEP_CYCLES)  # the device is busy well past the queueing below
        sleeping = torch.cuda.Event()
        sleeping.record()
        torch.cuda.set_sync_debug_mode("error")
        try:
            masks = builder.build(grammars, states, torch.device("cuda"))
            sample = sampler.sample_without_sync(logits, states, masks)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert not sleeping.query(), "queueing the masked sampling waited for the device"
        token_ids = sample.result().token_ids
        for row, token_id in enumerate(token_ids):
            if grammars[row] is not None:
                assert grammars[row].matcher.accept_token(token_id), (row, token_id)
    finally:
        compiler.close()


@pytest.mark.parametrize("graph_batch", [0, 16])
def test_an_engine_serves_constrained_rows_beside_plain_ones_without_host_waits(graph_batch: int,
                                                                               monkeypatch) -> None:
    def refusing_host_waits(method):
        def run(self, *args):
            mode = torch.cuda.get_sync_debug_mode()  # launch calls queue_sampling: the outer mode comes back
            torch.cuda.set_sync_debug_mode("error")
            try:
                return method(self, *args)
            finally:
                torch.cuda.set_sync_debug_mode(mode)
        return run

    for name in ("launch", "fill_masks", "queue_sampling"):
        monkeypatch.setattr(ModelRunner, name, refusing_host_waits(getattr(ModelRunner, name)))
    config = model_config_for_shape("smollm2-135m")
    engine_config = EngineConfig(device="cuda", dtype="bfloat16", max_model_len=512, max_running_requests=16,
                                 max_step_tokens=96, max_prefill_chunk_tokens=64, enable_prefix_cache=True,
                                 kv_cache_memory_mib=512, cuda_graph_max_batch=graph_batch)
    model = random_causal_lm(config, torch.bfloat16, "cuda", seed=5)
    kv_cache = build_kv_cache(engine_config, config, num_blocks=256)
    runner, _ = build_runner(model, kv_cache, engine_config, engine_config.max_model_len,
                             model.model.layers[0].self_attn.backend)
    tokenizer = synthetic_tokenizer(config.vocab_size)
    vocabulary = build_vocabulary(tokenizer, config.vocab_size, [EOS])
    grammars = ConstraintCompiler(vocabulary, CompileCache(vocabulary.info, None), 10_000)
    engine = assemble_engine(runner, config, tokenizer, engine_config, engine_config.max_model_len, grammars=grammars)
    engine.start()
    constraint = OutputConstraint(ConstraintKind.REGEX, REGEX)
    prompt_generator = torch.Generator().manual_seed(7)
    requests = [
        GenerationRequest(f"r{i}", tuple(torch.randint(10, config.vocab_size, (3 + 11 * i,),
                                                       generator=prompt_generator).tolist()),
                          SamplingParams(temperature=0.0, output_constraint=constraint if i % 3 else None),
                          StoppingParams(max_output_tokens=20, ignore_eos=not i % 3))
        for i in range(12)
    ]
    try:
        done = generate(engine, requests)
    finally:
        engine.shutdown()
    for request, result in zip(requests, done):
        if request.sampling.output_constraint is None:
            assert result.finish_reason is FinishReason.MAX_OUTPUT_TOKENS and len(result.token_ids) == 20
        else:
            assert result.finish_reason is FinishReason.EOS_TOKEN and result.token_ids[-1] == EOS
            assert re.fullmatch(REGEX, "".join(f"t{token_id}" for token_id in result.token_ids[:-1]))
