"""SmolLM2's GGUF weights kept quantized (`--cpu-weights int4`: `BlockLinear`, float32 arithmetic) against the
dequantized float32 path: on chat prompts, the same greedy answers, and log-probabilities within float32 rounding
(`TOLERANCE` nats, every vocabulary entry) for the prompt and answer teacher-forced in one prefill (the
dequantize-then-matmul path) and for sequences of at most `SMALL_BATCH` tokens (the kernel's own path)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from arbi_grpc.attention.metadata import AttentionMetadata, token_positions
from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.models.block_linear import SMALL_BATCH, BlockLinear
from arbi_grpc.models.loader import load_model
from arbi_grpc.text.tokenizer import TextTokenizer

pytestmark = pytest.mark.slow

PROMPTS = ("What is the capital of France?", "How do I boil an egg?")
ANSWER_TOKENS = 56  # prompt and answer exceed SMALL_BATCH: the teacher-forced prefill takes the matmul path
BLOCK_SIZE = 16
TOLERANCE = 1e-4  # nats; float32 accumulation order moves logits of ~20 by about 1e-5


def log_probs(model, config, token_ids: list[int]) -> torch.Tensor:
    """[L, V] next-token log-probabilities of one sequence, prefilled at once."""
    length = len(token_ids)
    num_blocks = -(-length // BLOCK_SIZE)
    kv_cache = PagedKVCache.for_model(config, num_blocks=num_blocks, block_size=BLOCK_SIZE, dtype=torch.float32,
                                      device="cpu")
    metadata = AttentionMetadata.build(query_lens=[length], seq_lens=[length], block_tables=[list(range(num_blocks))],
                                       block_size=BLOCK_SIZE, device="cpu", batch_slots=[0])
    with torch.inference_mode():
        hidden = model(torch.tensor(token_ids), token_positions([length], [length], "cpu"), metadata, kv_cache)
        return model.compute_logits(hidden).log_softmax(-1)


def greedy_answer(model, config, prompt_ids: list[int]) -> list[int]:
    sequence = list(prompt_ids)
    for _ in range(ANSWER_TOKENS):  # recomputes the prefix each step: short, and needs no decode harness
        sequence.append(int(log_probs(model, config, sequence)[-1].argmax()))
    return sequence


def test_quantized_path_matches_the_float_path(smollm2_dir: Path) -> None:
    quantized, config = load_model(smollm2_dir, keep_quantized=True)
    dense, _ = load_model(smollm2_dir, keep_quantized=False)
    assert isinstance(quantized.model.layers[0].mlp.gate_up, BlockLinear)
    assert isinstance(quantized.logits_projection, BlockLinear)
    tokenizer = TextTokenizer.from_model_dir(smollm2_dir)

    for prompt in PROMPTS:
        prompt_ids = tokenizer.encode(f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n")
        sequence = greedy_answer(dense, config, prompt_ids)
        assert len(sequence) > SMALL_BATCH
        actual = log_probs(quantized, config, sequence)
        error = (actual - log_probs(dense, config, sequence)).abs().max()
        assert error <= TOLERANCE, (prompt, float(error))
        answer = slice(len(prompt_ids) - 1, len(sequence) - 1)  # positions predicting the answer tokens
        assert actual[answer].argmax(-1).tolist() == sequence[len(prompt_ids):], prompt  # the same greedy answer
        short = sequence[:SMALL_BATCH]
        error = (log_probs(quantized, config, short) - log_probs(dense, config, short)).abs().max()
        assert 0 < error <= TOLERANCE, (prompt, float(error))  # above 0: not the float path's own arithmetic
