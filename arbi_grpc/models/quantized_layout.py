"""Which matrices a model stores block-quantized (or `--cpu-weights int8` quantizes), and the bytes the CPU decoder
then holds, without torch: what `plan` and the boot's estimate count (the measured budget counts the loaded
tensors themselves).

The byte count follows `CausalLM.fuse_projections`: a fused group (q/k/v, gate/up) whose members share one block
kind is held as stored (`block_linear.BlockLinear`: q4 half a byte per weight plus a float16 scale and minimum per
32, q8 a byte plus a float16 scale per 32); an int8 group is held as int8 codes and a bfloat16 scale per row
(`int8_weights.Int8Linear`); any other group is float (dequantized matrices in float32). A block-quantized
embedding table and output projection are held as stored too, once when tied (`BlockEmbedding`).
"""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Iterator
from pathlib import Path

from arbi_grpc.models.config import ModelConfig
from arbi_grpc.cpu_extensions import compiler_found

# The GGUF block formats the import keeps (`gguf/quantized_tensors.py`), by GGML type name.
GGUF_KINDS = {"Q4_0": "q4", "Q4_1": "q4", "Q8_0": "q8"}
# Where a GGUF import keeps them, beside the float32 `model.safetensors` (outside its `*.safetensors`).
QUANTIZED_WEIGHTS_FILE = "quantized/model.safetensors"
GROUP = 32
_SUFFIX_KINDS = {".q4": "q4", ".q8": "q8"}
INT8 = "int8"
_INT8_SCALE_BYTES = 2
# `BlockLinear` reads the codes itself for up to SMALL_BATCH rows (benchmarks/cpu_weight_kernels.py), and
# multiplies a larger batch through float32 chunks of the weight's rows of at most DEQUANTIZE_CHUNK_BYTES (the
# tied 49,152-row table of SmolLM2 would otherwise take 113 MiB per call).
SMALL_BATCH = 64
DEQUANTIZE_CHUNK_BYTES = 8 * 1024 * 1024


def stored_kinds(weights_file: Path) -> dict[str, str]:
    """{checkpoint name: "q4" | "q8"} of a quantized safetensors file, from its header; empty when absent."""
    try:
        with weights_file.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
    except (OSError, ValueError, struct.error):
        return {}
    kinds = {}
    for name in header:
        for suffix, kind in _SUFFIX_KINDS.items():
            if name.endswith(suffix):
                kinds[name[: -len(suffix)]] = kind
    return kinds


def cpu_weight_form(cpu_weights: str, device: str, world_size: int, model: ModelConfig) -> str:
    """What `--cpu-weights` holds for `model`: an explicit form as given; auto is int4 for a GGUF import with
    block-quantized matrices served by one CPU rank when a C++ compiler is found for its kernel, else float."""
    if cpu_weights != "auto":
        return cpu_weights
    quantized = device == "cpu" and world_size == 1 and bool(model.quantized_matrices)
    return "int4" if quantized and compiler_found() else "float"


def with_stored_quantization(model: ModelConfig, model_dir: Path) -> ModelConfig:
    """`model` noting the matrices `model_dir` stores block-quantized (none for a plain HF directory)."""
    kinds = stored_kinds(model_dir / QUANTIZED_WEIGHTS_FILE)
    return dataclasses.replace(model, quantized_matrices=tuple(sorted(kinds.items())))


def _stored(kind: str, rows: int, columns: int) -> int:
    """Bytes of a [rows, columns] matrix as `BlockLinear` holds it: the stored codes, float16 scales (and minimums)."""
    groups = rows * (columns // GROUP)
    return rows * columns // 2 + groups * 4 if kind == "q4" else rows * columns + groups * 2


def _layer_groups(model: ModelConfig) -> Iterator[tuple[list[str], list[int], int]]:
    """(checkpoint names, their rows, the shared columns) of each matmul of every layer, as fused."""
    hidden = model.hidden_size
    query, kv = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    for index in range(model.num_layers):
        attention, mlp = f"model.layers.{index}.self_attn.", f"model.layers.{index}.mlp."
        yield [attention + f"{p}_proj.weight" for p in "qkv"], [query, kv, kv], hidden
        yield [attention + "o_proj.weight"], [hidden], query
        yield [mlp + "gate_proj.weight", mlp + "up_proj.weight"], [model.intermediate_size] * 2, hidden
        yield [mlp + "down_proj.weight"], [hidden], model.intermediate_size


def int8_kinds(model: ModelConfig) -> dict[str, str]:
    """{checkpoint name: "int8"} of the matrices `--cpu-weights int8` quantizes: every layer matrix."""
    return {name: INT8 for names, _, _ in _layer_groups(model) for name in names}


def dequantize_chunk_rows(rows: int, columns: int) -> int:
    """Rows of a [rows, columns] block-quantized matrix that `BlockLinear` dequantizes at a time."""
    return max(1, min(rows, DEQUANTIZE_CHUNK_BYTES // (columns * 4)))


def dequantize_scratch_bytes(model: ModelConfig, kinds: dict[str, str], tokens: int) -> int:
    """The most a `BlockLinear` product of `tokens` rows holds beside its input and output: above SMALL_BATCH
    rows, one float32 chunk of the weight and the chunk's product, for the largest of the block-quantized matrices
    `kinds` names."""
    if tokens <= SMALL_BATCH:
        return 0
    shapes = [(sum(rows), columns) for names, rows, columns in _layer_groups(model)
              if {kinds.get(name) for name in names} in ({"q4"}, {"q8"})]
    shapes += [(model.vocab_size, model.hidden_size) for name in ("model.embed_tokens.weight", "lm_head.weight")
               if kinds.get(name) in ("q4", "q8")]
    return max((dequantize_chunk_rows(rows, columns) * (columns + tokens) * 4 for rows, columns in shapes), default=0)


def cpu_weight_bytes(model: ModelConfig, kinds: dict[str, str], element: int) -> int:
    """The weight bytes the CPU decoder holds for `model` with the matrices `kinds` quantized ("q4", "q8": block
    quantized; "int8": per-row int8), the rest in `element`-byte floats (dequantized matrices in float32)."""
    hidden = model.hidden_size
    query, kv = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim

    def group(names: list[str], rows: list[int], columns: int) -> int:
        found = {kinds.get(name) for name in names}
        kind = found.pop() if len(found) == 1 else None
        if kind == INT8:  # `int8_weights.Int8Linear`: a byte per weight and a bfloat16 scale per row
            return sum(rows) * (columns + _INT8_SCALE_BYTES)
        if kind is not None:
            return _stored(kind, sum(rows), columns)
        return sum(row * columns * (4 if name in kinds else element) for name, row in zip(names, rows))

    total = hidden * element  # the final norm
    total += sum(group(*matmul) for matmul in _layer_groups(model))
    per_layer = 2 * hidden + (query + 2 * kv if model.attention_bias else 0)
    per_layer += (hidden if model.output_projection_bias else 0) + (2 * model.head_dim if model.qk_norm else 0)
    total += model.num_layers * per_layer * element
    embedding = model.vocab_size * hidden

    def table(name: str) -> int:
        kind = kinds.get(name)
        return _stored(kind, model.vocab_size, hidden) if kind in ("q4", "q8") else embedding * element

    total += table("model.embed_tokens.weight")
    if not model.tie_word_embeddings:
        total += table("lm_head.weight")
    return total
