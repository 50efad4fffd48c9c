"""The embedded SmolLM2 import: config facts, weights against the GGUF, tokenizer files, HF loadability."""

from __future__ import annotations

import json
import random

import gguf
import numpy as np
import pytest
import torch
from safetensors import safe_open

from arbi_grpc.models.gguf.tensors import undo_rope_row_interleave
from arbi_grpc.models.model_cache import DEFAULT_MODEL, ResolvedModel

CHAT_PROMPT = "What is the capital of France?"


def read_json(model: ResolvedModel, name: str) -> dict:
    return json.loads((model.directory / name).read_text(encoding="utf-8"))


def test_import_writes_every_hf_file(imported_smollm2: ResolvedModel) -> None:
    assert imported_smollm2.name == DEFAULT_MODEL
    present = {path.name for path in imported_smollm2.directory.iterdir()}
    expected = {
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"
    }
    assert expected <= present


def test_config_matches_smollm2_facts(imported_smollm2: ResolvedModel) -> None:
    config = read_json(imported_smollm2, "config.json")
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert config["num_hidden_layers"] == 30
    assert config["hidden_size"] == 576
    assert config["num_attention_heads"] == 9
    assert config["num_key_value_heads"] == 3
    assert config["head_dim"] == 64
    assert config["vocab_size"] == 49152
    assert config["intermediate_size"] == 1536
    assert config["tie_word_embeddings"] is True
    assert config["rms_norm_eps"] == 1e-5
    assert config["rope_theta"] == 100000.0
    assert config["max_position_embeddings"] == 8192
    assert config["rope_scaling"] is None


def test_generation_and_tokenizer_config(imported_smollm2: ResolvedModel) -> None:
    generation = read_json(imported_smollm2, "generation_config.json")
    assert (generation["bos_token_id"], generation["eos_token_id"]) == (1, 2)
    tokenizer_config = read_json(imported_smollm2, "tokenizer_config.json")
    assert tokenizer_config["eos_token"] == "<|im_end|>"
    assert tokenizer_config["add_bos_token"] is False
    assert "<|im_start|>" in tokenizer_config["chat_template"]
    assert "add_generation_prompt" in tokenizer_config["chat_template"]


def test_weights_are_the_dequantized_gguf_tensors(
    imported_smollm2: ResolvedModel, smollm2_gguf_reader: gguf.GGUFReader
) -> None:
    by_name = {tensor.name: tensor for tensor in smollm2_gguf_reader.tensors}
    layer = random.randrange(30)
    checks = {
        "model.embed_tokens.weight": ("token_embd.weight", None),
        f"model.layers.{layer}.self_attn.v_proj.weight": (f"blk.{layer}.attn_v.weight", None),
        f"model.layers.{layer}.mlp.down_proj.weight": (f"blk.{layer}.ffn_down.weight", None),
        f"model.layers.{layer}.input_layernorm.weight": (f"blk.{layer}.attn_norm.weight", None),
        f"model.layers.{layer}.self_attn.q_proj.weight": (f"blk.{layer}.attn_q.weight", 9),
        f"model.layers.{layer}.self_attn.k_proj.weight": (f"blk.{layer}.attn_k.weight", 3),
    }
    with safe_open(str(imported_smollm2.directory / "model.safetensors"), framework="numpy") as weights:
        names = set(weights.keys())
        assert len(names) == 272 and "lm_head.weight" not in names
        for hf_name, (gguf_name, permuted_heads) in checks.items():
            source = by_name[gguf_name]
            expected = gguf.quants.dequantize(np.asarray(source.data), source.tensor_type)
            if permuted_heads is not None:
                expected = undo_rope_row_interleave(expected, permuted_heads)
            actual = weights.get_tensor(hf_name)
            assert actual.dtype == np.float32
            np.testing.assert_array_equal(actual, expected, err_msg=hf_name)


def test_chat_prompt_renders_and_tokenizes_with_transformers(imported_smollm2: ResolvedModel) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(imported_smollm2.directory)
    messages = [{"role": "user", "content": CHAT_PROMPT}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    ids = tokenizer(text)["input_ids"]
    assert ids[0] == 1 and ids.count(1) == 3 and ids.count(2) == 2


@pytest.mark.slow
def test_greedy_answer_with_transformers_reference(imported_smollm2: ResolvedModel) -> None:
    """Wrong Q/K un-permutation scrambles RoPE and the model stops answering "Paris"."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(imported_smollm2.directory)
    model = LlamaForCausalLM.from_pretrained(imported_smollm2.directory, dtype=torch.float32)
    assert model.config.rope_parameters["rope_theta"] == pytest.approx(100000.0)
    messages = [{"role": "user", "content": CHAT_PROMPT}]
    inputs = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=10, do_sample=False)
    answer = tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer, answer
