"""Which part of each checkpoint tensor a rank holds (Llama, Qwen2 and Qwen3 share the layout), and the shapes
that cannot split.

Column-parallel (split along the output rows): q/k/v projections (whole heads: rank r holds query heads
r*H/N .. and the KV heads they read, r*Hkv/N ..), the MLP gate and up projections, the embedding and the
LM head (vocabulary slices). Row-parallel (split along the input columns): the attention output projection and
the MLP down projection, whose partial sums the decoder all-reduces; their bias, when present, is held by rank
0 alone so the sum counts it once. Norm weights are replicated. Imports no torch (`plan` sizes ranks with it).
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.models.config import ModelConfig

if TYPE_CHECKING:  # `plan` imports this module without torch
    from torch import Tensor

_COLUMN_PARALLEL = re.compile(
    r"(model\.embed_tokens\.weight|lm_head\.weight"
    r"|.*\.self_attn\.[qkv]_proj\.(weight|bias)|.*\.mlp\.(gate|up)_proj\.weight)$"
)
_ROW_PARALLEL = re.compile(r".*\.(self_attn\.o_proj|mlp\.down_proj)\.weight$")
_ROW_PARALLEL_BIAS = re.compile(r".*\.self_attn\.o_proj\.bias$")


def check_shardable(config: ModelConfig, world_size: int) -> None:
    """Raises InvalidArgumentError("tensor_parallel_size", ...) naming every dimension of `config` that
    `world_size` ranks cannot split evenly."""
    if world_size == 1:
        return
    dimensions = {
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "intermediate_size": config.intermediate_size,
        "vocab_size": config.vocab_size,
    }
    uneven = [f"{name} {size}" for name, size in dimensions.items() if size % world_size]
    if uneven:
        raise InvalidArgumentError(
            "tensor_parallel_size",
            f"{world_size} ranks cannot split this {config.architecture}: {', '.join(uneven)} "
            f"{'is' if len(uneven) == 1 else 'are'} not divisible by {world_size}",
        )


def per_rank_model_config(config: ModelConfig, world_size: int) -> ModelConfig:
    """The shapes one rank's KV pool and memory estimate see: heads, KV heads and intermediate size divided by
    `world_size` (the vocabulary stays whole here: token ids and special tokens are the model's)."""
    check_shardable(config, world_size)
    return dataclasses.replace(config, num_heads=config.num_heads // world_size,
                               num_kv_heads=config.num_kv_heads // world_size,
                               intermediate_size=config.intermediate_size // world_size)


def split_axis(name: str) -> int | None:
    """The axis along which tensor `name` is split (0: output rows, 1: input columns), None if replicated."""
    if _COLUMN_PARALLEL.match(name):
        return 0
    if _ROW_PARALLEL.match(name):
        return 1
    return None


def checkpoint_shape(name: str, rank_shape: tuple[int, ...], world_size: int) -> tuple[int, ...]:
    """The whole tensor's shape in the checkpoint, given the shape of one rank's part of it."""
    axis = split_axis(name)
    if axis is None:
        return rank_shape
    return tuple(size * world_size if index == axis else size for index, size in enumerate(rank_shape))


def shard_tensor(name: str, tensor: Tensor, rank: int, world_size: int) -> Tensor:
    """Rank `rank`'s part of checkpoint tensor `name` (a copy owning its memory when split)."""
    if _ROW_PARALLEL_BIAS.match(name):
        return tensor if rank == 0 else tensor.new_zeros(tensor.shape)
    axis = split_axis(name)
    if axis is None or world_size == 1:
        return tensor
    size = tensor.shape[axis] // world_size
    return tensor.narrow(axis, rank * size, size).contiguous()
