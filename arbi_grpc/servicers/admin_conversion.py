"""Conversion of the server's state (resident models, engine stats, settings, limits) into AdminService
messages. Engine names (`num_*`) are mapped to the protos' AIP names (`*_count`) here only.
"""

from __future__ import annotations

import dataclasses

from arbi_client.arbi.v1 import admin_service_pb2 as service_pb
from arbi_client.arbi.v1 import admin_types_pb2 as admin_pb

from arbi_grpc.config import SchedulingLimits
from arbi_grpc.engine.engine import EngineStats, RequestSnapshot
from arbi_grpc.memory.budget import MemoryComponent
from arbi_grpc.memory.measure import tensor_bytes
from arbi_grpc.models.model_cache import EMBEDDED_MODELS, CachedModel
from arbi_grpc.embeddings.embedding_model import EmbeddingModel
from arbi_grpc.models.bert import BERT_ARCHITECTURE
from arbi_grpc.served_model import ServedModel
from arbi_grpc.server_config import ServerConfig


def model_info(served: ServedModel) -> admin_pb.ModelInfo:
    return admin_pb.ModelInfo(
        name=served.name,
        architecture=served.model_config.architecture,
        parameter_count=served.parameter_count,
        vocabulary_size=served.model_config.vocab_size,
        max_context_tokens=served.max_model_len,
    )


def embedding_model_info(model: EmbeddingModel) -> admin_pb.ModelInfo:
    return admin_pb.ModelInfo(
        name=model.name,
        architecture=BERT_ARCHITECTURE,
        parameter_count=sum(t.numel() for t in model.encoder.weights.values()),
        vocabulary_size=model.vocab_size,
        max_context_tokens=model.max_tokens,
    )


def runtime_config(settings: SchedulingLimits) -> admin_pb.RuntimeConfig:
    return admin_pb.RuntimeConfig(**dataclasses.asdict(settings))


def server_limits(config: ServerConfig, settings: SchedulingLimits,
                  generate_token_required: bool) -> admin_pb.ServerLimits:
    return admin_pb.ServerLimits(
        max_message_bytes=config.max_message_bytes,
        max_concurrent_streams=config.max_concurrent_streams,
        keepalive_time_ms=config.keepalive_time_ms,
        keepalive_timeout_ms=config.keepalive_timeout_ms,
        max_session_generations=config.max_session_generations,
        runtime=runtime_config(settings),
        generate_token_required=generate_token_required,
    )


def available_models(resident: list[ServedModel],
                     cached: list[CachedModel]) -> list[admin_pb.AvailableModel]:
    """The resident models first (the default first), then known and cached models by name (one entry per
    name)."""
    sizes: dict[str, int] = {}
    for model in cached:
        sizes[model.name] = max(sizes.get(model.name, 0), model.size_bytes)
    resident_names = [served.name for served in resident]
    names = resident_names + [name for name in sorted(set(sizes) | {model.name for model in EMBEDDED_MODELS})
                              if name not in resident_names]
    return [
        admin_pb.AvailableModel(
            name=name,
            resident=name in resident_names,
            cached=name in sizes,
            size_bytes=sizes.get(name, 0),
        )
        for name in names
    ]


def running_request(snapshot: RequestSnapshot) -> admin_pb.RunningRequest:
    return admin_pb.RunningRequest(
        request_id=snapshot.request_id,
        state=admin_pb.REQUEST_STATE_RUNNING if snapshot.running else admin_pb.REQUEST_STATE_WAITING,
        prompt_token_count=snapshot.num_prompt_tokens,
        output_token_count=snapshot.num_output_tokens,
        kv_block_count=snapshot.num_blocks,
    )


def memory_report_fields(served: ServedModel, stats: EngineStats) -> dict[str, int | float | str]:
    """The fields of GetMemoryReportResponse; bytes come from the storage in force (a KV calibration reload may
    change them). The pool's bytes are its tensors' (`KVStorage.key_caches`, `value_caches`): blocks and any state
    the storage keeps per first block or batch slot, which the per-token figure spreads over the whole capacity."""
    storage = served.engine.kv_storage
    used = stats.num_total_blocks - stats.num_free_blocks
    block_bytes = storage.bytes_per_block
    block_tokens = served.config.block_size
    pool_bytes = tensor_bytes([*storage.key_caches, *storage.value_caches])
    capacity_tokens = stats.num_total_blocks * block_tokens
    return {
        "kv_block_count": stats.num_total_blocks,
        "kv_used_block_count": used,
        "kv_free_block_count": stats.num_free_blocks,
        "kv_cached_block_count": stats.num_cached_blocks,
        "kv_block_tokens": block_tokens,
        "kv_block_bytes": block_bytes,
        "kv_cache_bytes": pool_bytes,
        "kv_used_bytes": used * block_bytes,
        "weight_bytes": served.weight_bytes,
        "kv_bytes_per_token_per_layer": pool_bytes / (capacity_tokens * served.model_config.num_layers),
        "kv_capacity_token_count": capacity_tokens,
        "max_running_requests": served.engine.max_running_capacity,
        "max_running_requests_source": served.running_requests_source,
    }


def chat_model_memory(served: ServedModel, stats: EngineStats) -> service_pb.ChatModelMemory:
    storage = served.engine.kv_storage
    return service_pb.ChatModelMemory(
        name=served.name,
        kv_block_count=stats.num_total_blocks,
        kv_used_block_count=stats.num_total_blocks - stats.num_free_blocks,
        kv_free_block_count=stats.num_free_blocks,
        kv_cache_bytes=tensor_bytes([*storage.key_caches, *storage.value_caches]),
        weight_bytes=served.weight_bytes,
        budget_bytes=served.memory_budget.total_bytes,
    )


def embedding_model_memory(model: EmbeddingModel, component: MemoryComponent) -> service_pb.EmbeddingModelMemory:
    """An embedding model's memory: its loaded weights, and the rest of its budget component (activations)."""
    return service_pb.EmbeddingModelMemory(name=model.name, weight_bytes=model.weight_bytes,
                                           activation_bytes=max(0, component.num_bytes - model.weight_bytes))


def kv_codec(served: ServedModel | None) -> str:
    """GetServerInfoResponse.kv_codec: "none" for plain KV tensors, else the TKV setting in force."""
    return "none" if served is None else served.engine.kv_storage.codec_name
