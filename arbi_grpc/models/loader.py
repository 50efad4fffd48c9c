"""`load_model`: build the decoder for an HF-style model directory and fill it with its safetensors weights."""

from __future__ import annotations

from pathlib import Path

import torch

from arbi_grpc.attention.backend import AttentionBackend
from arbi_grpc.attention.torch_paged import TorchPagedAttention
from arbi_grpc.errors import ModelLoadError
from arbi_grpc.models.checkpoint_reader import read_checkpoint_tensors, read_hf_config, read_quantized_tensors
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.decoder import CausalLM
from arbi_grpc.models.gguf.importer import QUANTIZED_WEIGHTS_FILE
from arbi_grpc.models.int8_weights import Int8Weight
from arbi_grpc.models.quantized_weights import QuantizedWeight
from arbi_grpc.parallel.group import SINGLE_RANK, TensorParallelGroup
from arbi_grpc.parallel.shard_plan import check_shardable, checkpoint_shape, shard_tensor

# Checkpoints written by older transformers versions carry RoPE tables that we recompute.
_RECOMPUTED_SUFFIX = ".rotary_emb.inv_freq"


def load_model(
    model_dir: Path,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    attention_backend: AttentionBackend | None = None,
    tensor_parallel: TensorParallelGroup = SINGLE_RANK,
    keep_quantized: bool = False,
    quantize_int8: bool = False,
    int8_activations: bool = False,
) -> tuple[CausalLM, ModelConfig]:
    """Read `config.json` and the weights of `model_dir`; returns the model (eval, no grad, projections fused)
    and its config. Under tensor parallelism the model holds the rank's shard (`parallel.shard_plan`), cut from
    each tensor as it is read.

    Without `attention_backend`, the torch reference backend tuned for `device` runs attention. On the CPU,
    with `keep_quantized`, the matrices a GGUF import stored quantized (`QUANTIZED_WEIGHTS_FILE`) are read in
    that form and run by the int4 kernels; everything else is read from the float checkpoint in `dtype`. On the
    CPU, with `quantize_int8`, the layers' matrices (every 2-D tensor under `model.layers.`) are read from the
    float checkpoint and quantized to per-row int8 (`int8_weights`), one at a time; the embedding table, the
    output projection, norms and biases stay in `dtype`. With `int8_activations`, the block-quantized products
    multiply int8-quantized activations (`CausalLM.multiply_blocks_in_integers`; ValueError when there are none).
    Raises ModelLoadError for missing, truncated or corrupt files and missing or mis-shaped tensors,
    UnsupportedArchitectureError for architectures outside SUPPORTED_ARCHITECTURES, NotImplementedError
    for features of a supported architecture that the decoder lacks (e.g. sliding windows, yarn RoPE), and
    InvalidArgumentError("tensor_parallel_size", ...) for shapes the ranks cannot split.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ModelLoadError(f"{model_dir}: model directory does not exist")
    config = ModelConfig.from_hf_config(read_hf_config(model_dir))
    rank, world_size = tensor_parallel.rank, tensor_parallel.world_size
    check_shardable(config, world_size)
    backend = attention_backend or TorchPagedAttention.for_device(device)

    def is_ignored(name: str) -> bool:
        # A tied checkpoint may still store lm_head.weight; the tie wins, as in transformers.
        return name.endswith(_RECOMPUTED_SUFFIX) or (config.tie_word_embeddings and name == "lm_head.weight")

    quantized_file = model_dir / QUANTIZED_WEIGHTS_FILE
    read_quantized = keep_quantized and torch.device(device).type == "cpu" and quantized_file.is_file()
    if read_quantized and world_size > 1:
        raise NotImplementedError("quantized CPU weights under tensor parallelism: the quantized blocks are not "
                                  "split across ranks yet")
    if quantize_int8 and (keep_quantized or torch.device(device).type != "cpu" or world_size > 1):
        raise NotImplementedError("int8 weights are quantized from a float checkpoint on the CPU with one rank: "
                                  f"got device {torch.device(device).type}, {world_size} rank(s), "
                                  f"keep_quantized={keep_quantized}")

    def layer_matrix_int8(name: str, tensor: torch.Tensor) -> Int8Weight | None:
        return Int8Weight.quantize(tensor) if name.startswith("model.layers.") and tensor.dim() == 2 else None

    def read_weights(rank_shapes: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor | QuantizedWeight | Int8Weight]:
        expected = {name: checkpoint_shape(name, shape, world_size) for name, shape in rank_shapes.items()}
        quantized = read_quantized_tensors(quantized_file, expected) if read_quantized else {}
        dense = read_checkpoint_tensors(
            model_dir, is_ignored=lambda name: is_ignored(name) or name in quantized, dtype=dtype, device=device,
            expected_shapes={name: shape for name, shape in expected.items() if name not in quantized},
            select=None if world_size == 1 else lambda name, tensor: shard_tensor(name, tensor, rank, world_size),
            quantize=layer_matrix_int8 if quantize_int8 else None,
        )
        return {**dense, **quantized}

    model = CausalLM.from_weights(config, read_weights, attention_backend=backend, device=device,
                                  tensor_parallel=tensor_parallel)
    if int8_activations:
        model.multiply_blocks_in_integers()
    return model, config
