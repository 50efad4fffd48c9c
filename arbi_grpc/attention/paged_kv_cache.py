"""The plain paged KV cache storage (a `KVStorage`): per layer, one key and one value tensor of fixed-size token
blocks, in bf16 or fp32, and no state per first block or per batch slot.

Block allocation (which sequence owns which block) belongs to the engine; this module only owns the memory.
"""

from __future__ import annotations

import math
import mmap

import torch
from torch import Tensor

from arbi_grpc.models.config import ModelConfig


def zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str) -> Tensor:
    """torch.zeros; on the CPU backed by an anonymous mapping (zero pages until written; the tensor keeps the
    mapping alive)."""
    if torch.device(device).type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    mapping = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # private: reads map the zero page
    return torch.frombuffer(mapping, dtype=dtype).view(shape)


class PagedKVCache:
    """K and V blocks of every layer, each `[num_blocks, block_size, num_kv_heads, head_dim]`.

    Memory starts zeroed: backends may read stale or padding slots under a mask, and those must hold finite
    values (0 * NaN would leak NaN through the attention-weighted sum). On the CPU the zeros are an anonymous
    mapping's, filled by the OS on first touch, so a block becomes resident memory only once written.
    """

    def __init__(
        self,
        *,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        for name, value in (
            ("num_layers", num_layers),
            ("num_blocks", num_blocks),
            ("block_size", block_size),
            ("num_kv_heads", num_kv_heads),
            ("head_dim", head_dim),
        ):
            if value <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        self.num_layers = num_layers
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        self.key_caches: list[Tensor] = [zeros(shape, dtype, device) for _ in range(num_layers)]
        self.value_caches: list[Tensor] = [zeros(shape, dtype, device) for _ in range(num_layers)]

    @classmethod
    def for_model(
        cls, config: ModelConfig, *, num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device | str
    ) -> PagedKVCache:
        """A cache shaped for `config`'s layers and key/value heads."""
        return cls(
            num_layers=config.num_layers,
            num_blocks=num_blocks,
            block_size=block_size,
            num_kv_heads=config.num_kv_heads,
            head_dim=config.head_dim,
            dtype=dtype,
            device=device,
        )

    @staticmethod
    def bytes_per_block_for(
        *, num_layers: int, block_size: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype
    ) -> int:
        """Bytes one block costs over all layers, K and V: lets the engine size the pool before allocating."""
        element_size = torch.empty((), dtype=dtype).element_size()
        return 2 * num_layers * block_size * num_kv_heads * head_dim * element_size

    @property
    def bytes_per_block(self) -> int:
        return self.bytes_per_block_for(
            num_layers=self.num_layers,
            block_size=self.block_size,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            dtype=self.dtype,
        )

    @property
    def device(self) -> torch.device:
        return self.key_caches[0].device

    @property
    def num_first_blocks(self) -> int:
        """Every block may start a sequence."""
        return self.num_blocks

    @property
    def num_batch_slots(self) -> None:
        """No state per running sequence."""
        return None

    @property
    def codec_tensors(self) -> list[Tensor]:
        return []

    @property
    def codec_name(self) -> str:
        return "none"

    def seed_reused_blocks(self, batch_slot: int, block_table: list[int], num_reused_blocks: int) -> None:
        """Nothing to seed: attention reads reused blocks as they are."""

    def layer(self, layer_index: int) -> tuple[Tensor, Tensor]:
        """The (key, value) block tensors of one layer."""
        return self.key_caches[layer_index], self.value_caches[layer_index]
