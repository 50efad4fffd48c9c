"""Assembles a ready-to-serve engine from an EngineConfig: resolve and load the model, size the paged KV
cache from its memory budget, and wire scheduler, model runner, tokenizer and output processing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.input_processor import InputProcessor
from arbi_grpc.engine.kv_cache_manager import KVCacheManager
from arbi_grpc.engine.model_runner import ModelRunner
from arbi_grpc.engine.output_processor import OutputProcessor
from arbi_grpc.engine.scheduler import Scheduler, SchedulerLimits
from arbi_grpc.errors import ResourceExhaustedError
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.kv_cache import PagedKVCache
from arbi_grpc.models.loader import load_model
from arbi_grpc.models.model_cache import resolve_model
from arbi_grpc.text.tokenizer import TextTokenizer

log = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class ServedModel:
    """Everything the servicers need: the running engine and what it serves."""

    name: str
    model_config: ModelConfig
    engine: Engine
    inputs: InputProcessor
    max_model_len: int
    config: EngineConfig


def build_served_model(config: EngineConfig) -> ServedModel:
    """Loads the model and starts its engine thread."""
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    resolved = resolve_model(config.model)
    dtype = _DTYPES[config.dtype]
    device = torch.device(config.device)
    model, model_config = load_model(resolved.directory, dtype=dtype, device=device)
    tokenizer = TextTokenizer.from_model_dir(resolved.directory)
    bytes_per_block = PagedKVCache.bytes_per_block_for(
        num_layers=model_config.num_layers,
        block_size=config.block_size,
        num_kv_heads=model_config.num_kv_heads,
        head_dim=model_config.head_dim,
        dtype=dtype,
    )
    num_blocks = config.kv_cache_memory_bytes // bytes_per_block
    if num_blocks < 1:
        raise ResourceExhaustedError(
            f"kv_cache_memory_mib={config.kv_cache_memory_mib} holds no KV block of {bytes_per_block} bytes"
        )
    max_model_len = min(
        config.max_model_len or model_config.max_position_embeddings,
        model_config.max_position_embeddings,
        num_blocks * config.block_size,
    )
    kv_cache = PagedKVCache.for_model(
        model_config, num_blocks=num_blocks, block_size=config.block_size, dtype=dtype, device=device
    )
    eos_token_ids = frozenset(tokenizer.eos_token_ids) | frozenset(model_config.eos_token_ids)
    engine = Engine(
        scheduler=Scheduler(
            KVCacheManager(num_blocks, config.block_size, config.enable_prefix_cache),
            SchedulerLimits(
                max_running=config.max_running_requests,
                max_step_tokens=config.max_step_tokens,
                max_prefill_chunk_tokens=config.max_prefill_chunk_tokens,
            ),
        ),
        runner=ModelRunner(model, kv_cache, config.block_size, device),
        tokenizer=tokenizer,
        output_processor=OutputProcessor(eos_token_ids, max_model_len),
        max_waiting_requests=config.max_waiting_requests,
    )
    engine.start()
    log.info(
        "serving %s: %d KV blocks of %d tokens (%.0f MiB), context %d tokens",
        resolved.name, num_blocks, config.block_size, num_blocks * bytes_per_block / 2**20, max_model_len,
    )
    return ServedModel(
        name=resolved.name,
        model_config=model_config,
        engine=engine,
        inputs=InputProcessor(tokenizer, model_config.vocab_size, max_model_len),
        max_model_len=max_model_len,
        config=config,
    )
