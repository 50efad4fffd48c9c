"""The real SmolLM2-135M-Instruct weights (GGUF imported to an HF directory) through our paged path must give
HF transformers' logits on the same directory."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.models.loader import load_model
from tests.unit.models.paged_harness import PagedStepRunner, chunked_schedule, tokens_needed

pytestmark = pytest.mark.slow


def test_smollm2_paged_logits_match_transformers(smollm2_dir: Path, rng: random.Random) -> None:
    from transformers import LlamaForCausalLM

    model, config = load_model(smollm2_dir, keep_quantized=False)  # the dequantized float32 path
    assert (config.num_layers, config.num_heads, config.num_kv_heads, config.head_dim) == (30, 9, 3, 64)
    reference = LlamaForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32, attn_implementation="eager")

    # Two ~32-token prompts: the first prefilled in two chunks, then three decode steps for both.
    steps = chunked_schedule(rng, [rng.randint(28, 36), rng.randint(28, 36)], decode_steps=3)
    tokens = {sequence: [rng.randrange(config.vocab_size) for _ in range(count)]
              for sequence, count in tokens_needed(steps).items()}
    block_size = 16
    kv_cache = PagedKVCache.for_model(config, num_blocks=16, block_size=block_size, dtype=torch.float32, device="cpu")
    ours = PagedStepRunner(block_size=block_size, num_blocks=16, rng=rng).run_model(model, kv_cache, tokens, steps)

    with torch.inference_mode():
        for sequence, token_list in tokens.items():
            expected = reference(torch.tensor([token_list])).logits[0]  # [L, vocab]
            scale = expected.abs().max().item()
            error = (ours[sequence] - expected).abs().max().item()
            assert error <= 1e-4 * max(scale, 1.0), f"sequence {sequence}: max error {error} at logit scale {scale}"
