"""Our decoder through the paged path must reproduce HF transformers' logits for random small models."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.models.loader import load_model
from tests.unit.models.paged_harness import PagedStepRunner, chunked_schedule, randomize_weights, tokens_needed

_COMMON = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=112,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
    bos_token_id=1,
    eos_token_id=2,
    attn_implementation="eager",
)
_LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 10000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,  # puts head-dim frequencies in all three scaling regimes
}

REFERENCE_MODELS = {
    "llama": lambda: LlamaForCausalLM(LlamaConfig(**_COMMON, num_key_value_heads=2, tie_word_embeddings=False)),
    "llama-rope-llama3-tied": lambda: LlamaForCausalLM(
        LlamaConfig(**_COMMON, num_key_value_heads=1, tie_word_embeddings=True, rope_parameters=_LLAMA3_ROPE)
    ),
    "qwen2-bias": lambda: Qwen2ForCausalLM(Qwen2Config(**_COMMON, num_key_value_heads=2, tie_word_embeddings=False)),
    "qwen3-qk-norm": lambda: Qwen3ForCausalLM(
        Qwen3Config(**_COMMON, num_key_value_heads=2, head_dim=24, tie_word_embeddings=True)
    ),
}


def _save_reference(name: str, directory: Path, torch_generator: torch.Generator) -> torch.nn.Module:
    torch.manual_seed(torch_generator.initial_seed())
    reference = REFERENCE_MODELS[name]().eval()
    randomize_weights(reference, torch_generator)
    # The llama variant is also written sharded, to read it back through the safetensors index.
    reference.save_pretrained(directory, max_shard_size="40KB" if name == "llama" else "1GB")
    return reference


@pytest.mark.parametrize("block_size", [4, 16])
@pytest.mark.parametrize("name", sorted(REFERENCE_MODELS))
def test_paged_logits_match_transformers(
    name: str, block_size: int, tmp_path: Path, rng: random.Random, torch_generator
) -> None:
    reference = _save_reference(name, tmp_path, torch_generator)
    if name == "llama":
        assert (tmp_path / "model.safetensors.index.json").is_file()
    model, config = load_model(tmp_path)

    prompt_lens = [rng.randint(6, 17) for _ in range(3)]
    steps = chunked_schedule(rng, prompt_lens, decode_steps=3)
    totals = tokens_needed(steps)
    tokens = {sequence: [rng.randrange(config.vocab_size) for _ in range(count)] for sequence, count in totals.items()}
    kv_cache = PagedKVCache.for_model(config, num_blocks=64, block_size=block_size, dtype=torch.float32, device="cpu")
    runner = PagedStepRunner(block_size=block_size, num_blocks=64, rng=rng)
    ours = runner.run_model(model, kv_cache, tokens, steps)

    with torch.no_grad():
        for sequence, token_list in tokens.items():
            expected = reference(torch.tensor([token_list])).logits[0]  # [L, vocab]
            scale = expected.abs().max().item()
            error = (ours[sequence] - expected).abs().max().item()
            assert error <= 1e-4 * max(scale, 1.0), f"sequence {sequence}: max error {error} at logit scale {scale}"


def test_tied_checkpoint_has_no_lm_head_and_shares_embedding(tmp_path: Path, torch_generator) -> None:
    _save_reference("qwen3-qk-norm", tmp_path, torch_generator)
    model, config = load_model(tmp_path)
    assert config.tie_word_embeddings and model.lm_head is None
    hidden = torch.randn(3, config.hidden_size, generator=torch_generator)
    expected = hidden @ model.model.embed_tokens.weight.T
    torch.testing.assert_close(model.compute_logits(hidden), expected)
