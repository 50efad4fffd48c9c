"""AdminService.ReloadKvCalibration's work: load and check a new TKV bundle and build its storage while the old
one serves (`kv_codec.calibration.reload`), then, with no request in the engine, have the engine swap the storage in
(`Engine.replace_kv_storage`: it recaptures the CUDA graphs that read it and empties the prefix cache, whose blocks
were encoded with the old bundle). Any failure before the swap leaves the old bundle serving.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec.calibration.reload import load_recalibrated, tkv_storage
from arbi_grpc.model_host import FailedPreconditionError, ModelHost


@dataclass(frozen=True)
class KvReload:
    """What a reload did: the model it acted on, the setting now in force, requests cancelled by the drain, prefix
    blocks dropped."""

    model: str
    kv_codec: str
    num_cancelled: int
    num_flushed_blocks: int


async def reload_kv_calibration(host: ModelHost, model: str, path: str, kv_bits: str,
                                drain_timeout_s: float) -> KvReload:
    """Reloads the bundle of the resident chat model `model` names (empty: the default): FAILED_PRECONDITION when
    none is resident or it runs no TKV cache, NOT_FOUND for a name not served, UNAVAILABLE while it loads."""
    if host.served is None:
        raise FailedPreconditionError("no model is resident; load one with LoadModel")
    served = host.resident(model)
    current = tkv_storage(served.engine.kv_storage, served.config.kv_cache_dtype)
    if not path:
        raise InvalidArgumentError("path", "name the calibration bundle directory to load")
    config = dataclasses.replace(served.config, kv_calibration=path, kv_bits=kv_bits)  # validates kv_bits
    storage = await asyncio.to_thread(
        load_recalibrated, current, Path(path), config.kv_bits_pair,
        config.kv_cache_memory_bytes or served.memory_budget.component("kv_cache").num_bytes
    )
    flushed, cancelled = await host.rebuild_quiesced(
        served.name, f"reloading the KV calibration of model {served.name!r} from {path}", drain_timeout_s,
        lambda engine: engine.replace_kv_storage(storage), dataclasses.replace(host.config, kv_calibration=path,
                                                                                kv_bits=kv_bits),
    )
    return KvReload(served.name, storage.codec_name, cancelled, flushed)
