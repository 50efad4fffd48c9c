"""GGUF's Q4_0, Q4_1 and Q8_0 matrices kept in their block quantization (`models/quantized_weights.py`'s
stored form), in HF layout and row order; the import writes them beside the float32 weights.

Block layouts (32 weights along the input axis each, little-endian):
- Q4_0: fp16 d, 16 bytes of codes; w = d (q - 8)          -> scale d, min -8 d
- Q4_1: fp16 d, fp16 m, 16 bytes of codes; w = d q + m    -> scale d, min m
  (code j of a block is the low nibble of byte j for j < 16, the high nibble of byte j - 16 otherwise)
- Q8_0: fp16 d, 32 int8 codes; w = d q                    -> scale d
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType

from arbi_grpc.errors import ModelLoadError
from arbi_grpc.models.gguf.tensors import TensorPlan, undo_rope_row_interleave
from arbi_grpc.models.quantized_layout import GGUF_KINDS
from arbi_grpc.models.quantized_weights import GROUP_SIZE, QuantizedWeight

KEPT_QUANTIZED = tuple(GGMLQuantizationType[name] for name in GGUF_KINDS)
_BLOCK_BYTES = {GGMLQuantizationType.Q4_0: 18, GGMLQuantizationType.Q4_1: 20, GGMLQuantizationType.Q8_0: 34}


def keeps_quantized(plan: TensorPlan) -> bool:
    """Whether the import stores this tensor quantized too: a matrix in one of the kept block formats."""
    return plan.source.tensor_type in KEPT_QUANTIZED and len(plan.hf_shape) == 2


def read_quantized(path: Path, plan: TensorPlan) -> QuantizedWeight:
    """The tensor of `plan` in stored quantized form, rows in HF order."""
    tensor = plan.source
    rows, columns = plan.hf_shape
    block_bytes = _BLOCK_BYTES[tensor.tensor_type]
    raw = np.asarray(tensor.data)
    if raw.size != rows * (columns // GROUP_SIZE) * block_bytes:
        raise ModelLoadError(f"{path}: tensor {tensor.name} data is truncated or corrupt ({raw.size} bytes)")
    blocks = raw.reshape(rows, columns // GROUP_SIZE, block_bytes)
    scale = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)  # [N, G]
    if tensor.tensor_type == GGMLQuantizationType.Q8_0:
        codes = blocks[..., 2:].copy().view(np.int8).reshape(rows, columns)
        minimum = None
    else:
        if tensor.tensor_type == GGMLQuantizationType.Q4_1:
            minimum = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
            nibbles = blocks[..., 4:]
        else:
            minimum = -8 * scale
            nibbles = blocks[..., 2:]
        in_order = np.concatenate((nibbles & 0x0F, nibbles >> 4), axis=-1).reshape(rows, columns)  # codes 0..15
        codes = (in_order[:, 0::2] | (in_order[:, 1::2] << 4)).astype(np.uint8)  # stored: two per byte
    parts = [codes, scale] + ([minimum] if minimum is not None else [])
    if plan.permuted_heads is not None:
        parts = [undo_rope_row_interleave(part, plan.permuted_heads) for part in parts]
    if not all(np.isfinite(part).all() for part in parts[1:]):
        raise ModelLoadError(f"{path}: tensor {tensor.name} holds NaN or infinite scales (corrupt data)")
    tensors = [torch.from_numpy(np.ascontiguousarray(part)) for part in parts]
    kind = "q8" if tensor.tensor_type == GGMLQuantizationType.Q8_0 else "q4"
    return QuantizedWeight(kind, tensors[0], tensors[1], tensors[2] if len(tensors) > 2 else None)
