"""`--cpu-activations int8` on SmolLM2's GGUF blocks: every block-quantized product runs `Int8DotLinear` (the embedding
lookup stays exact), and its log-probabilities stay near the exact int4 path's. Measured on four chat answers
(2026-12-03): a token's log-probability moves 0.027-0.037 nats on average, at most 0.29; the argmax agrees at 93-100%
of answer positions, departures at near-ties."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from arbi_grpc.models.block_linear import BlockEmbedding
from arbi_grpc.models.block_linear_int8_dot import Int8DotLinear
from arbi_grpc.models.loader import load_model
from arbi_grpc.text.tokenizer import TextTokenizer
from tests.unit.models.test_smollm2_quantized_parity import log_probs

pytestmark = pytest.mark.slow

TEXT = ("<|im_start|>user\nHow do I boil an egg?<|im_end|>\n<|im_start|>assistant\nPlace the egg in a saucepan and "
        "cover it with cold water. Bring the water to a boil, then lower the heat and simmer for nine minutes. Cool "
        "the egg in cold water before peeling it.")
MEAN_SHIFT_BOUND = 0.08  # nats: about twice the measured mean
ARGMAX_AGREEMENT = 0.85


def test_integer_activations_stay_near_the_exact_product(smollm2_dir: Path) -> None:
    exact, config = load_model(smollm2_dir, keep_quantized=True)
    integer, _ = load_model(smollm2_dir, keep_quantized=True, int8_activations=True)
    layers = integer.model.layers
    products = [integer.logits_projection] + [getattr(layer.self_attn, name) for layer in layers for name in
                                              ("qkv", "output")] + [getattr(layer.mlp, name) for layer in layers
                                                                    for name in ("gate_up", "down")]
    assert all(isinstance(product, Int8DotLinear) for product in products)
    assert isinstance(integer.model.embed_tokens, BlockEmbedding)
    token_ids = TextTokenizer.from_model_dir(smollm2_dir).encode(TEXT)

    expected, actual = log_probs(exact, config, token_ids), log_probs(integer, config, token_ids)

    targets = torch.tensor(token_ids[1:])[:, None]
    shift = (actual[:-1].gather(1, targets) - expected[:-1].gather(1, targets)).abs()
    assert 0 < float(shift.mean()) <= MEAN_SHIFT_BOUND, float(shift.mean())
    agreement = (actual.argmax(-1) == expected.argmax(-1)).float().mean()
    assert agreement >= ARGMAX_AGREEMENT, float(agreement)


def test_a_model_without_block_weights_is_refused(smollm2_dir: Path) -> None:
    with pytest.raises(ValueError, match="holds none"):
        load_model(smollm2_dir, keep_quantized=False, int8_activations=True)
