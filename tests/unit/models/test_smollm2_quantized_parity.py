"""SmolLM2's GGUF weights kept quantized (the CPU int4 kernels, the default) against the dequantized float32
path: prompt log-probabilities within 0.2 nats (mean under 0.05), and greedy choices equal except at near-ties
(where they differ, the float path rates the quantized choice within 0.25 nats of its own), on chat prompts
followed by the float path's greedy answer, teacher-forced in one prefill each."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from arbi_grpc.attention.metadata import AttentionMetadata, token_positions
from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.models.cpu_quantized_ops import PackedInt4Linear
from arbi_grpc.models.loader import load_model
from arbi_grpc.text.tokenizer import TextTokenizer

pytestmark = pytest.mark.slow

PROMPTS = ("What is the capital of France?", "How do I boil an egg?")
ANSWER_TOKENS = 16
BLOCK_SIZE = 16


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
    assert isinstance(quantized.model.layers[0].mlp.gate_up, PackedInt4Linear)
    tokenizer = TextTokenizer.from_model_dir(smollm2_dir)

    for prompt in PROMPTS:
        prompt_ids = tokenizer.encode(f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n")
        sequence = greedy_answer(dense, config, prompt_ids)
        expected, actual = log_probs(dense, config, sequence), log_probs(quantized, config, sequence)
        targets = torch.tensor(sequence[1:])[:, None]
        prompt_error = (actual[:-1].gather(-1, targets) - expected[:-1].gather(-1, targets)).abs()
        assert prompt_error.max() <= 0.2 and prompt_error.mean() <= 0.05, (prompt, prompt_error.max())

        answer = slice(len(prompt_ids) - 1, len(sequence) - 1)  # positions predicting the answer tokens
        choices = actual[answer].argmax(-1, keepdim=True)
        margin = expected[answer].max(-1, keepdim=True).values - expected[answer].gather(-1, choices)
        assert margin.max() <= 0.25, (prompt, margin.flatten().tolist())
