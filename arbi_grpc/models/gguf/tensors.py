"""GGUF tensors as Hugging Face tensors: names, shapes, float32 dequantization and llama's Q/K row order.

`plan_tensors` checks the whole tensor directory against the metadata before anything is written;
`read_tensor` then produces one float32 array at a time in HF layout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from gguf.gguf_reader import ReaderTensor
from gguf.quants import dequantize

from arbi_grpc.errors import ModelLoadError
from arbi_grpc.models.gguf.config import ArchitectureSpec, ModelDimensions, required_layer_tensors

EMBEDDING_TENSOR = "token_embd.weight"
OUTPUT_TENSOR = "output.weight"

_GLOBAL_NAMES = {
    EMBEDDING_TENSOR: "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    OUTPUT_TENSOR: "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.bias": "self_attn.o_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.(.+)")


@dataclass(frozen=True)
class TensorPlan:
    """One GGUF tensor and where it goes in the HF checkpoint."""

    source: ReaderTensor
    hf_name: str
    hf_shape: tuple[int, ...]
    # Heads whose rows llama.cpp interleaved for its RoPE (llama attn_q / attn_k); None: rows as stored.
    permuted_heads: int | None


def gguf_shape_in_hf_order(tensor: ReaderTensor) -> tuple[int, ...]:
    """GGUF lists dimensions fastest-first (ne0 = columns); HF/numpy list them slowest-first."""
    return tuple(int(size) for size in reversed(tensor.shape.tolist()))


def embedding_rows(path: Path, tensors: Sequence[ReaderTensor]) -> int:
    """The vocabulary size as the embedding matrix stores it."""
    for tensor in tensors:
        if tensor.name == EMBEDDING_TENSOR:
            shape = gguf_shape_in_hf_order(tensor)
            if len(shape) != 2:
                raise ModelLoadError(f"{path}: {EMBEDDING_TENSOR} has shape {shape}, expected [vocab, hidden]")
            return shape[0]
    raise ModelLoadError(f"{path}: GGUF has no {EMBEDDING_TENSOR} tensor")


def plan_tensors(
    path: Path, tensors: Sequence[ReaderTensor], spec: ArchitectureSpec, dims: ModelDimensions, attention_bias: bool
) -> list[TensorPlan]:
    """Map every GGUF tensor to its HF name and shape, refusing unknown, missing or mis-shaped tensors."""
    plans = [_plan_one(path, tensor, spec, dims) for tensor in tensors]
    present = {plan.source.name for plan in plans}
    required = ["output_norm.weight"] + [
        f"blk.{layer}.{suffix}"
        for layer in range(dims.num_layers)
        for suffix in required_layer_tensors(spec, attention_bias)
    ]
    missing = [name for name in required if name not in present]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ModelLoadError(f"{path}: GGUF {spec.gguf_name} model lacks tensors {shown}")
    return plans


def _plan_one(path: Path, tensor: ReaderTensor, spec: ArchitectureSpec, dims: ModelDimensions) -> TensorPlan:
    name = tensor.name
    layer_match = _LAYER_TENSOR.fullmatch(name)
    if name in _GLOBAL_NAMES:
        hf_name, suffix = _GLOBAL_NAMES[name], name
    elif layer_match and layer_match.group(2) in _LAYER_NAMES:
        layer, suffix = int(layer_match.group(1)), layer_match.group(2)
        if layer >= dims.num_layers:
            raise ModelLoadError(f"{path}: tensor {name} is beyond the {dims.num_layers} layers in the metadata")
        hf_name = f"model.layers.{layer}.{_LAYER_NAMES[suffix]}"
    else:
        raise NotImplementedError(
            f"GGUF tensor {name!r} has no Hugging Face {spec.hf_class} counterpart (experts, rope_freqs "
            "and other llama.cpp extensions are not supported)"
        )
    expected = _expected_shape(suffix, dims)
    shape = gguf_shape_in_hf_order(tensor)
    if shape != expected:
        raise ModelLoadError(f"{path}: tensor {name} has shape {list(shape)}, the metadata implies {list(expected)}")
    permuted_heads = None
    if spec.qk_rows_permuted and suffix in ("attn_q.weight", "attn_q.bias"):
        permuted_heads = dims.num_heads
    elif spec.qk_rows_permuted and suffix in ("attn_k.weight", "attn_k.bias"):
        permuted_heads = dims.num_kv_heads
    return TensorPlan(source=tensor, hf_name=hf_name, hf_shape=shape, permuted_heads=permuted_heads)


def _expected_shape(suffix: str, dims: ModelDimensions) -> tuple[int, ...]:
    hidden, q_rows, kv_rows = dims.hidden_size, dims.num_heads * dims.head_dim, dims.num_kv_heads * dims.head_dim
    shapes: dict[str, tuple[int, ...]] = {
        EMBEDDING_TENSOR: (dims.vocab_size, hidden),
        OUTPUT_TENSOR: (dims.vocab_size, hidden),
        "output_norm.weight": (hidden,),
        "attn_norm.weight": (hidden,),
        "ffn_norm.weight": (hidden,),
        "attn_q.weight": (q_rows, hidden),
        "attn_k.weight": (kv_rows, hidden),
        "attn_v.weight": (kv_rows, hidden),
        "attn_output.weight": (hidden, q_rows),
        "attn_q.bias": (q_rows,),
        "attn_k.bias": (kv_rows,),
        "attn_v.bias": (kv_rows,),
        "attn_output.bias": (hidden,),
        "attn_q_norm.weight": (dims.head_dim,),
        "attn_k_norm.weight": (dims.head_dim,),
        "ffn_gate.weight": (dims.intermediate_size, hidden),
        "ffn_up.weight": (dims.intermediate_size, hidden),
        "ffn_down.weight": (hidden, dims.intermediate_size),
    }
    return shapes[suffix]


def read_tensor(path: Path, plan: TensorPlan) -> np.ndarray:
    """Dequantize one tensor to a contiguous float32 array in HF layout and row order."""
    tensor = plan.source
    try:
        # A plain ndarray view of the memory map: numpy's memmap subclass costs a Python call per block view.
        values = dequantize(np.asarray(tensor.data), tensor.tensor_type).reshape(plan.hf_shape)
    except NotImplementedError as error:
        raise NotImplementedError(
            f"GGUF tensor type {tensor.tensor_type.name} (tensor {tensor.name}) cannot be dequantized"
        ) from error
    except ValueError as error:
        raise ModelLoadError(f"{path}: tensor {tensor.name} data is truncated or corrupt: {error}") from error
    if plan.permuted_heads is not None:
        values = undo_rope_row_interleave(values, plan.permuted_heads)
    values = np.ascontiguousarray(values, dtype=np.float32)
    if not np.isfinite(values).all():
        raise ModelLoadError(f"{path}: tensor {tensor.name} holds NaN or infinite values (corrupt data)")
    return values


def undo_rope_row_interleave(rows: np.ndarray, num_heads: int) -> np.ndarray:
    """Inverse of llama.cpp's convert-time Q/K permutation for llama.

    HF orders each head's rows as two rotary halves [x_0 .. x_{D/2-1}, y_0 .. y_{D/2-1}]; llama.cpp's
    interleaved RoPE wants the pairs adjacent, so convert_hf_to_gguf stored them as [x_0, y_0, x_1, y_1, ...]
    (reshape [H, 2, D/2] -> swap -> [H, D/2, 2]). Swapping back restores HF order. Works for weights and biases.
    """
    head_dim = rows.shape[0] // num_heads
    trailing = rows.shape[1:]
    interleaved = rows.reshape(num_heads, head_dim // 2, 2, *trailing)  # [H, D/2, pair, ...]
    return interleaved.swapaxes(1, 2).reshape(rows.shape)  # [H, pair, D/2, ...] -> [H*D, ...]
