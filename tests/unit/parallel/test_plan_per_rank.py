"""`arbi-serve plan --tensor-parallel-size N` estimates one rank's budget: its KV heads per block, its heads and
MLP columns in the weights (the vocabulary counted whole, so the estimate errs high)."""

from __future__ import annotations

import json

import pytest

from arbi_grpc.cli import main
from arbi_grpc.memory.estimate import parameter_count
from arbi_grpc.models.reference_shapes import model_config_for_shape

FLAGS = ["plan", "--json", "--shape", "llama3-8b", "--device", "cuda", "--cuda-graph-max-batch", "0", "--no-audio",
         "--memory-limit-mib", "200000", "--kv-cache-memory-mib", "4096", "--max-context", "8192"]


def _plan(capsys: pytest.CaptureFixture[str], *flags: str) -> dict:
    assert main([*FLAGS, *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_rank_holds_its_share_of_the_kv_heads_and_weights(capsys: pytest.CaptureFixture[str]) -> None:
    whole, rank = _plan(capsys), _plan(capsys, "--tensor-parallel-size", "2")
    assert rank["components"]["kv_cache"]["bytes"] == whole["components"]["kv_cache"]["bytes"]
    # 4 of the 8 KV heads: half the bytes per block, twice the blocks in the same pool.
    assert "4096 blocks x 16 tokens x 1024 KiB per block" in rank["components"]["kv_cache"]["detail"]
    assert "2048 blocks x 16 tokens x 2048 KiB per block" in whole["components"]["kv_cache"]["detail"]
    config = model_config_for_shape("llama3-8b")
    whole_per_rank = 2 * config.vocab_size * config.hidden_size  # untied embedding and LM head, counted whole
    whole_per_rank += (2 * config.num_layers + 1) * config.hidden_size  # the norms, replicated
    split = parameter_count(config) - whole_per_rank  # attention and MLP projections
    assert rank["components"]["weights"]["bytes"] == 2 * (split // 2 + whole_per_rank)  # bfloat16


def test_a_shape_that_does_not_split_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*FLAGS, "--tensor-parallel-size", "3"]) == 2
    assert "num_attention_heads 32, num_key_value_heads 8, intermediate_size 14336 are not divisible by 3" \
           in capsys.readouterr().err
