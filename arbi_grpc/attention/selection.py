"""Chooses, from the engine config, the attention backend the decoder calls and the KV cache storage it reads.

The two are picked together because a backend is typed over one storage kind (`AttentionBackend[S]`): the bf16/fp32
backends read `PagedKVCache`, the TKV backends read the codec's packed cache. The rest of the engine sees only
the `KVStorage` protocol.
"""

from __future__ import annotations

import torch

from arbi_grpc.attention.backend import AttentionBackend
from arbi_grpc.attention.kv_storage import KVStorage
from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.attention.torch_paged import TorchPagedAttention
from arbi_grpc.config import EngineConfig
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration
from arbi_grpc.kv_codec.calibration.engine_bundle import check_model_shape
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache
from arbi_grpc.memory.kv_pool import num_sink_blocks
from arbi_grpc.models.config import ModelConfig

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def select_attention_backend(config: EngineConfig) -> AttentionBackend:
    """The backend named by `config.attention_backend` (already resolved from "auto" by EngineConfig)."""
    if config.kv_cache_dtype == "tkv":
        return _select_tkv_backend(config)
    if config.attention_backend == "torch" and config.device == "cpu":
        from arbi_grpc.attention.cpu_paged import cpu_paged_attention  # builds its C++ kernel on first use

        return cpu_paged_attention()
    if config.attention_backend == "torch":
        return TorchPagedAttention.for_device(config.device)
    if config.attention_backend == "triton":
        from arbi_grpc.attention.triton_paged import TritonPagedAttention

        return TritonPagedAttention()
    if config.attention_backend == "flashinfer":
        from arbi_grpc.attention.flashinfer_paged import FlashInferPagedAttention

        return FlashInferPagedAttention.for_dtypes(config.dtype, config.kv_cache_dtype)
    raise ValueError(f"unknown attention backend {config.attention_backend!r}")


def _select_tkv_backend(config: EngineConfig) -> AttentionBackend:
    """The TKV backend: the torch reference on "torch", the Triton kernels on "triton" (the default on cuda)."""
    if config.attention_backend == "torch":
        from arbi_grpc.kv_codec.torch_attention import TkvTorchPagedAttention

        return TkvTorchPagedAttention.for_device(config.device)
    if config.attention_backend == "triton":
        from arbi_grpc.kv_codec.triton_attention import TkvTritonPagedAttention

        return TkvTritonPagedAttention()
    raise InvalidArgumentError(
        "attention_backend",
        f"{config.attention_backend!r} cannot read a TKV cache; use 'torch' or 'triton' with --kv-cache-dtype tkv",
    )


def build_kv_cache(
    config: EngineConfig, model_config: ModelConfig, num_blocks: int, tkv_calibration: TkvCalibration | None = None
) -> KVStorage:
    """The zeroed paged KV cache of `num_blocks` blocks in the storage `config.kv_cache_dtype` names; a TKV cache
    is built from `tkv_calibration` (`engine_bundle.load_engine_calibration`), checked against the model, with
    the sink rows the pool planner counts (`kv_pool.num_sink_blocks`) and a tail slot of `kv_exact_blocks` blocks per
    batch slot."""
    if config.kv_cache_dtype == "tkv":
        if tkv_calibration is None:
            raise InvalidArgumentError("kv_calibration", "a TKV cache is built from a calibration bundle; none given")
        if config.running_requests_auto:
            raise ValueError("a TKV cache holds a tail slot per running request: build it with the limit its pool "
                             "plan resolved (config.with_running_requests(plan.max_running_requests))")
        check_model_shape(tkv_calibration, model_config.num_layers, model_config.num_kv_heads, model_config.head_dim)
        return TkvPagedKVCache(tkv_calibration, num_blocks=num_blocks, block_size=config.block_size,
                               device=config.device,
                               num_sink_blocks=num_sink_blocks(num_blocks, config.max_running_requests),
                               num_tail_slots=config.max_running_requests, exact_blocks=config.kv_exact_window_blocks,
                               chunk_exact=config.kv_prefill_exact == "chunk")
    return PagedKVCache.for_model(
        model_config,
        num_blocks=num_blocks,
        block_size=config.block_size,
        dtype=TORCH_DTYPES[config.kv_cache_dtype],
        device=config.device,
    )
