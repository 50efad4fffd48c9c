"""Output constraints through the engine thread with a tiny random model on the CPU (word-level vocabulary
`t0 .. t95`, EOS 2): constrained outputs satisfy their grammar beside an unconstrained request that keeps its solo
output, with overlapped steps on; a compile past the time limit fails only its request, RESOURCE_EXHAUSTED, with
nothing held; a constraint the vocabulary cannot spell ends INVALID_ARGUMENT; an engine built without a grammar
compiler refuses constraints (UNIMPLEMENTED)."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.attention.selection import build_kv_cache
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.grammar.compile_cache import CompileCache
from arbi_grpc.engine.grammar.compiler import ConstraintCompiler
from arbi_grpc.engine.grammar.vocabulary import build_vocabulary
from arbi_grpc.engine.offline import CompletedRequest, generate
from arbi_grpc.engine.output_constraint import ConstraintKind, OutputConstraint
from arbi_grpc.engine.request import FinishReason, GenerationRequest
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.errors import InvalidArgumentError, ResourceExhaustedError, UnimplementedError
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.served_model import assemble_engine, build_runner
from benchmarks.gpu_decode import synthetic_tokenizer
from tests.unit.engine.tiny_llama import tiny_llama_config

TINY_CONFIG = tiny_llama_config()
MAX_MODEL_LEN = 128
NUM_BLOCKS = 64
EOS = 2
CONFIG = EngineConfig(device="cpu", max_model_len=MAX_MODEL_LEN, max_running_requests=4, max_step_tokens=64,
                      block_size=4, overlap_steps=True)
# Single-digit tokens only: "t1" is a prefix of "t11t12" that no token of this vocabulary continues ("1t12").
CHOICES = ("t5t6t7", "t9", "t3t8")
REPEATS = 'root ::= ("t3" | "t4"){3,5}'


def _engine(timeout_ms: int = 10_000, with_grammars: bool = True) -> Engine:
    model = random_causal_lm(TINY_CONFIG, torch.float32, "cpu", seed=5)
    kv_cache = build_kv_cache(CONFIG, TINY_CONFIG, num_blocks=NUM_BLOCKS)
    runner, _ = build_runner(model, kv_cache, CONFIG, MAX_MODEL_LEN, model.model.layers[0].self_attn.backend)
    tokenizer = synthetic_tokenizer(TINY_CONFIG.vocab_size)
    grammars = None
    if with_grammars:
        vocabulary = build_vocabulary(tokenizer, TINY_CONFIG.vocab_size, [EOS])
        grammars = ConstraintCompiler(vocabulary, CompileCache(vocabulary.info, None), timeout_ms)
    engine = assemble_engine(runner, TINY_CONFIG, tokenizer, CONFIG, MAX_MODEL_LEN, grammars=grammars)
    engine.start()
    return engine


def _request(request_id: str, constraint: OutputConstraint | None = None) -> GenerationRequest:
    return GenerationRequest(request_id, tuple(range(10, 22)), SamplingParams(temperature=0.0,
                                                                              output_constraint=constraint),
                             StoppingParams(max_output_tokens=24))


def _text(result: CompletedRequest) -> str:
    assert result.finish_reason is FinishReason.EOS_TOKEN and result.token_ids[-1] == EOS
    return "".join(f"t{token_id}" for token_id in result.token_ids[:-1])


def test_constrained_outputs_beside_an_unconstrained_one() -> None:
    engine = _engine()
    try:
        (alone,) = generate(engine, [_request("alone")], timeout_s=120)
        plain, choice, repeats = generate(engine, [
            _request("plain"),
            _request("choice", OutputConstraint(ConstraintKind.CHOICE, choices=CHOICES)),
            _request("repeats", OutputConstraint(ConstraintKind.EBNF_GRAMMAR, REPEATS)),
        ], timeout_s=120)
        assert plain.token_ids == alone.token_ids
        assert _text(choice) in CHOICES
        assert 3 <= len(repeats.token_ids) - 1 <= 5 and set(repeats.token_ids[:-1]) <= {3, 4}
        assert engine.stats().num_free_blocks == NUM_BLOCKS and engine.num_requests == 0
    finally:
        engine.shutdown()


def test_compile_past_the_limit_fails_only_its_request() -> None:
    engine = _engine(timeout_ms=1)
    many = OutputConstraint(ConstraintKind.CHOICE, choices=tuple(f"t{i % 90}t{i}" for i in range(3000)))
    try:
        with pytest.raises(ResourceExhaustedError, match="did not compile within 1 ms"):
            generate(engine, [_request("slow", many)], timeout_s=120)
        (plain,) = generate(engine, [_request("plain")], timeout_s=120)
        assert plain.finish_reason is FinishReason.MAX_OUTPUT_TOKENS
        stats = engine.stats()
        assert (stats.num_waiting, stats.num_free_blocks, engine.num_requests) == (0, NUM_BLOCKS, 0)
    finally:
        engine.shutdown()


def test_a_constraint_the_vocabulary_cannot_spell_is_invalid_argument() -> None:
    """"t1x": after the token t1 no token spells "x"; the mask allows nothing and the request ends."""
    engine = _engine()
    try:
        with pytest.raises(InvalidArgumentError, match="vocabulary cannot continue the output after 1 tokens"):
            generate(engine, [_request("x", OutputConstraint(ConstraintKind.CHOICE, choices=("t1x",)))],
                     timeout_s=120)
        assert engine.stats().num_free_blocks == NUM_BLOCKS and engine.num_requests == 0
    finally:
        engine.shutdown()


def test_an_engine_without_a_grammar_compiler_refuses_constraints() -> None:
    engine = _engine(with_grammars=False)
    try:
        with pytest.raises(UnimplementedError, match="without a grammar compiler"):
            generate(engine, [_request("c", OutputConstraint(ConstraintKind.REGEX, "t1+"))], timeout_s=120)
        assert engine.num_requests == 0
    finally:
        engine.shutdown()
