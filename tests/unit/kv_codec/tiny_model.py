"""A tiny random Llama model directory with a byte-level BPE tokenizer, for the calibration-run tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM

from tests.unit.models.paged_harness import randomize_weights

CORPUS = "Rivers carry sand to the sea, and the sea returns it to the land as dunes and beaches. " * 4
TINY_HEAD_DIM = 16
TINY_LAYERS = 2
TINY_KV_HEADS = 2


def write_tiny_model(directory: Path, generator: torch.Generator) -> Path:
    """A 2-layer Llama (4 query heads, 2 kv heads, head_dim 16) with random weights, plus its tokenizer."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator([CORPUS] * 10, trainer)
    config = LlamaConfig(
        vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=TINY_LAYERS, num_attention_heads=4,
        num_key_value_heads=TINY_KV_HEADS, max_position_embeddings=256, tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    randomize_weights(model, generator)
    model.save_pretrained(directory)
    backend.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    return directory
