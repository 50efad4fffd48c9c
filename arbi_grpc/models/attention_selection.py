"""Chooses, from the engine config, the attention backend the decoder calls and the KV cache storage it reads.

The two are picked together because a backend only understands some storages: the bf16/fp32 backends read
`PagedKVCache`, the TKV backends read the codec's packed cache.
"""

from __future__ import annotations

import torch

from arbi_grpc.config import EngineConfig
from arbi_grpc.models.attention_backend import AttentionBackend
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.kv_cache import PagedKVCache
from arbi_grpc.models.torch_paged_attention import TorchPagedAttention

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def select_attention_backend(config: EngineConfig) -> AttentionBackend:
    """The backend named by `config.attention_backend` (already resolved from "auto" by EngineConfig)."""
    if config.kv_cache_dtype == "tkv":
        raise NotImplementedError("kv_cache_dtype 'tkv': the TKV attention backends are not wired into the engine")
    if config.attention_backend == "torch":
        return TorchPagedAttention.for_device(config.device)
    if config.attention_backend == "triton":
        from arbi_grpc.models.triton_paged_attention import TritonPagedAttention

        return TritonPagedAttention()
    if config.attention_backend == "flashinfer":
        from arbi_grpc.models.flashinfer_attention import FlashInferPagedAttention

        return FlashInferPagedAttention.create()
    raise ValueError(f"unknown attention backend {config.attention_backend!r}")


def build_kv_cache(config: EngineConfig, model_config: ModelConfig, num_blocks: int) -> PagedKVCache:
    """The zeroed paged KV cache of `num_blocks` blocks in the storage `config.kv_cache_dtype` names."""
    if config.kv_cache_dtype == "tkv":
        raise NotImplementedError("kv_cache_dtype 'tkv': the TKV paged cache is not wired into the engine")
    return PagedKVCache.for_model(
        model_config,
        num_blocks=num_blocks,
        block_size=config.block_size,
        dtype=TORCH_DTYPES[config.kv_cache_dtype],
        device=config.device,
    )
