"""AdminService.ReloadKvCalibration's work: load and check a new TKV bundle and build its storage while the old
one serves, then, with no request in the engine, swap the storage, recapture the CUDA graphs that read it and
empty the prefix cache (its blocks were encoded with the old bundle). Any failure before the swap leaves the
old bundle serving.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from arbi_grpc.config import MIB
from arbi_grpc.engine.engine import Engine
from arbi_grpc.errors import InvalidArgumentError, ResourceExhaustedError
from arbi_grpc.kv_codec.calibration import TkvCalibration
from arbi_grpc.kv_codec.engine_calibration import check_model_shape, load_bundle
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache
from arbi_grpc.model_host import FailedPreconditionError, ModelHost


@dataclass(frozen=True)
class KvReload:
    """What a reload did: the setting now in force, requests cancelled by the drain, prefix blocks dropped."""

    kv_codec: str
    num_cancelled: int
    num_flushed_blocks: int


async def reload_kv_calibration(host: ModelHost, path: str, kv_bits: str, drain_timeout_s: float) -> KvReload:
    served = host.served
    if served is None:
        raise FailedPreconditionError("no model is resident; load one with LoadModel")
    current = served.engine.runner.kv_cache
    if not isinstance(current, TkvPagedKVCache):
        raise FailedPreconditionError(
            f"the KV cache is stored as {host.config.kv_cache_dtype}, not TKV: a calibration applies only to a server "
            "started with --kv-cache-dtype tkv --kv-calibration DIR"
        )
    if not path:
        raise InvalidArgumentError("path", "name the calibration bundle directory to load")
    config = dataclasses.replace(host.config, kv_calibration=path, kv_bits=kv_bits)  # validates kv_bits
    calibration = await asyncio.to_thread(
        load_bundle, Path(path), current.calibration.model_fingerprint, config.kv_bits_pair
    )
    check_model_shape(calibration, current.num_layers, current.num_kv_heads, current.head_dim)
    _check_budget(calibration, current, config.kv_cache_memory_bytes)
    storage = await asyncio.to_thread(
        TkvPagedKVCache, calibration, num_blocks=current.num_blocks, block_size=current.block_size,
        device=current.device, num_sink_blocks=current.num_sink_blocks, num_tail_slots=current.num_tail_slots,
        exact_blocks=current.exact_blocks,
    )
    flushed, cancelled = await host.rebuild_quiesced(
        f"reloading the KV calibration from {path}", drain_timeout_s, lambda engine: _swap(engine, storage), config
    )
    return KvReload(storage.setting_name, cancelled, flushed)


def _check_budget(calibration: TkvCalibration, current: TkvPagedKVCache, budget_bytes: int) -> None:
    needed = TkvPagedKVCache.num_bytes_for(
        calibration, current.block_size, current.num_blocks, current.num_sink_blocks, current.num_tail_slots,
        current.exact_blocks,
    )
    if needed > budget_bytes:
        raise ResourceExhaustedError(
            f"memory budget: with the new bits the KV cache's {current.num_blocks} blocks, "
            f"{current.num_sink_blocks} sink rows and {current.num_tail_slots} tail slots need {needed / MIB:.1f} MiB, "
            f"more than kv_cache_memory_mib={budget_bytes // MIB}; restart with a larger --kv-cache-memory-mib"
        )


def _swap(engine: Engine, storage: TkvPagedKVCache) -> int:
    """On the engine thread, between steps: the new storage in, CUDA graphs recaptured over it, the prefix
    cache emptied; returns how many cached blocks were dropped."""
    if engine.scheduler.num_unfinished:
        raise FailedPreconditionError("requests are still in the engine; the KV calibration was not changed")
    runner = engine.runner
    runner.kv_cache = storage
    if runner.decode_graphs is not None:
        runner.capture_decode_graphs(runner.decode_graphs.max_batch, runner.decode_graphs.max_model_len)
    return engine.scheduler.block_manager.flush_prefix_cache(None)
