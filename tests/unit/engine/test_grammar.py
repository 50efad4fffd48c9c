"""The grammar package on the CPU with the real SmolLM2 tokenizer: our TokenizerInfo equals xgrammar's own reading
of the HF tokenizer, our masks equal xgrammar's direct fill (one by one and batched), compiled grammars come back
from memory and from disk, the compile time limit fails with RESOURCE_EXHAUSTED, and matchers accept each
token once."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
import xgrammar as xgr

from arbi_grpc.engine.grammar.compile_cache import CompileCache
from arbi_grpc.engine.grammar.compiler import ConstraintCompiler
from arbi_grpc.engine.grammar.token_masks import BATCH_FILL_MIN_ROWS, TokenMaskBuilder
from arbi_grpc.engine.grammar.vocabulary import build_vocabulary
from arbi_grpc.engine.output_constraint import ConstraintKind, OutputConstraint
from arbi_grpc.engine.sampler import SamplingState
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.errors import ResourceExhaustedError
from arbi_grpc.text.tokenizer import TextTokenizer

VOCAB_SIZE = 49152  # SmolLM2's logits width
EOS = 2
SCHEMA = OutputConstraint(ConstraintKind.JSON_SCHEMA, json.dumps({
    "type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}, "required": ["name", "n"],
}), strict=True)
DOCUMENT = '{"name": "Ada", "n": 36}'


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir: Path) -> TextTokenizer:
    return TextTokenizer.from_model_dir(smollm2_dir)


@pytest.fixture(scope="module")
def vocabulary(tokenizer):
    return build_vocabulary(tokenizer, VOCAB_SIZE, [EOS])


def compiler_over(vocabulary, directory: Path | None, timeout_ms: int = 10_000, events: list | None = None):
    events = [] if events is None else events
    return ConstraintCompiler(vocabulary, CompileCache(vocabulary.info, directory), timeout_ms,
                              on_compiled=lambda seconds: events.append("compiled"),
                              on_cache_hit=lambda source: events.append(source))


def test_tokenizer_info_equals_xgrammars_reading_of_the_hf_tokenizer(smollm2_dir, vocabulary) -> None:
    from transformers import PreTrainedTokenizerFast  # the reference only: the server never imports it

    hf = PreTrainedTokenizerFast(tokenizer_file=str(smollm2_dir / "tokenizer.json"))
    reference = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=VOCAB_SIZE, stop_token_ids=[EOS])
    ours = vocabulary.info
    assert ours.vocab_type == reference.vocab_type == xgr.VocabType.BYTE_LEVEL
    assert ours.add_prefix_space == reference.add_prefix_space
    assert ours.vocab_size == reference.vocab_size
    assert ours.decoded_vocab == reference.decoded_vocab
    assert ours.stop_token_ids == [EOS]


@pytest.mark.parametrize("rows", [2, BATCH_FILL_MIN_ROWS + 1])
def test_masks_equal_xgrammars_direct_fill(tokenizer, vocabulary, rows) -> None:
    """Row r has accepted the first r tokens of a valid document; its mask allows exactly what a matcher over the
    same grammar allows, and applying it leaves those logits and -inf elsewhere."""
    compiler = compiler_over(vocabulary, None)
    compiled = compiler.compile(SCHEMA).result()
    document = tokenizer.encode(DOCUMENT)
    grammars = []
    for row in range(rows):
        grammar = compiler.matcher(compiled)
        grammar.advance(document[:row], 0)
        grammars.append(grammar)
    states = [SamplingState(SamplingParams(), StoppingParams(max_output_tokens=64), (), frozenset([EOS]))
              for _ in range(rows)]
    masks = TokenMaskBuilder(VOCAB_SIZE, [EOS]).build(grammars, states, torch.device("cpu"))
    assert masks is not None and masks.rows == list(range(rows)) and not masks.ending_rows
    reference = xgr.GrammarCompiler(vocabulary.info).compile_json_schema(SCHEMA.text, any_whitespace=False)
    expected = xgr.allocate_token_bitmask(rows, VOCAB_SIZE)
    for row in range(rows):
        matcher = xgr.GrammarMatcher(reference)
        for token_id in document[:row]:
            assert matcher.accept_token(token_id)
        matcher.fill_next_token_bitmask(expected, row)
    assert torch.equal(masks.bitmask, expected)
    logits = torch.randn(rows, VOCAB_SIZE)
    masked = logits.clone()
    masks.apply(masked)
    allowed = masked > float("-inf")
    assert allowed.sum(dim=1).min() >= 1
    assert torch.equal(masked[allowed], logits[allowed])
    assert bool(allowed[0, tokenizer.encode("{")[0]])


def test_a_finished_grammar_is_an_ending_row_while_min_output_bans_eos(vocabulary, tokenizer) -> None:
    compiler = compiler_over(vocabulary, None)
    grammar = compiler.matcher(compiler.compile(OutputConstraint(ConstraintKind.CHOICE, choices=("yes",))).result())
    grammar.advance(tokenizer.encode("yes"), 0)
    banning = SamplingState(SamplingParams(), StoppingParams(max_output_tokens=8, min_output_tokens=4), (),
                            frozenset([EOS]))
    masks = TokenMaskBuilder(VOCAB_SIZE, [EOS]).build([None, grammar], [banning, banning], torch.device("cpu"))
    assert masks.rows == [1] and masks.ending_rows == frozenset([1])
    grammar.advance(tokenizer.encode("yes") + [EOS], 0)
    assert grammar.is_terminated and not grammar.can_fill


def test_a_token_is_accepted_once(vocabulary, tokenizer) -> None:
    compiler = compiler_over(vocabulary, None)
    grammar = compiler.matcher(compiler.compile(SCHEMA).result())
    prompt = [7, 8, 9]
    document = tokenizer.encode(DOCUMENT)
    grammar.advance(prompt + document[:4], len(prompt))  # the output processor, as the host reads each token
    grammar.advance(prompt + document[:4], len(prompt))  # the model runner before it fills the next mask
    assert grammar.num_accepted == 4 and grammar.rejected_token is None
    grammar.advance(prompt + document + [EOS], len(prompt))
    assert grammar.is_terminated
    outside = compiler.matcher(compiler.compile(SCHEMA).result())
    outside.advance(tokenizer.encode("[1]"), 0)
    assert outside.rejected_token == tokenizer.encode("[1]")[0] and not outside.can_fill


def test_compiled_grammars_come_back_from_memory_then_disk(vocabulary, tmp_path) -> None:
    events: list[str] = []
    first = compiler_over(vocabulary, tmp_path, events=events)
    compiled = first.compile(SCHEMA).result()
    again = first.compile(SCHEMA)
    assert again.done() and again.result() is compiled
    assert events == ["compiled", "memory"]
    assert len(list(tmp_path.glob("*.json"))) == 1
    events.clear()
    restarted = compiler_over(vocabulary, tmp_path, events=events)
    from_disk = restarted.compile(SCHEMA).result()
    assert events == ["disk"]
    assert from_disk.serialize_json() == compiled.serialize_json()
    (next(tmp_path.glob("*.json"))).write_text("not a grammar")
    events.clear()
    assert compiler_over(vocabulary, tmp_path, events=events).compile(SCHEMA).result() is not None
    assert events == ["compiled"]  # an unreadable file is a miss, then replaced


def test_compile_past_the_time_limit_is_resource_exhausted(vocabulary) -> None:
    events: list[str] = []
    compiler = compiler_over(vocabulary, None, timeout_ms=1, events=events)
    many = OutputConstraint(ConstraintKind.CHOICE, choices=tuple(f"choice number {i}" for i in range(3000)))
    with pytest.raises(ResourceExhaustedError, match="did not compile within 1 ms"):
        compiler.compile(many).result(timeout=30)
    deadline = time.monotonic() + 30
    while "compiled" not in events and time.monotonic() < deadline:
        time.sleep(0.01)
    assert compiler.compile(many).result(timeout=0) is not None  # the late result was cached
    assert events == ["compiled", "memory"]
    compiler.close()


def test_choice_literals_are_escaped(vocabulary, tokenizer) -> None:
    choice = 'say "hi"\\n'
    compiler = compiler_over(vocabulary, None)
    grammar = compiler.matcher(compiler.compile(OutputConstraint(ConstraintKind.CHOICE, choices=(choice,))).result())
    grammar.advance(tokenizer.encode(choice) + [EOS], 0)
    assert grammar.rejected_token is None and grammar.is_terminated
