"""A running engine's TKV storage rebuilt from another calibration bundle (AdminService.ReloadKvCalibration): the
bundle is checked against the served model and the KV memory budget, then a storage of the current one's shape
(blocks, sink rows, a tail slot per batch slot, exact window) is built while the current one still serves. The
swap itself is the engine's (`Engine.replace_kv_storage`).
"""

from __future__ import annotations

from pathlib import Path

from arbi_grpc.attention.kv_storage import KVStorage
from arbi_grpc.config import MIB
from arbi_grpc.errors import FailedPreconditionError, ResourceExhaustedError
from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration
from arbi_grpc.kv_codec.calibration.engine_bundle import check_model_shape, load_bundle
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache


def tkv_storage(storage: KVStorage, kv_cache_dtype: str) -> TkvPagedKVCache:
    """`storage` as the TKV cache it is; FailedPreconditionError for another kind (`kv_cache_dtype` names it)."""
    if not isinstance(storage, TkvPagedKVCache):
        raise FailedPreconditionError(
            f"the KV cache is stored as {kv_cache_dtype}, not TKV: a calibration applies only to a server "
            "started with --kv-cache-dtype tkv --kv-calibration DIR"
        )
    return storage


def load_recalibrated(current: TkvPagedKVCache, bundle_dir: Path, kv_bits: tuple[int, int] | None,
                      budget_bytes: int) -> TkvPagedKVCache:
    """The bundle in `bundle_dir` (with `kv_bits` applied), checked against the model `current` serves and against
    `budget_bytes`, as a zeroed storage shaped like `current`. Slow (reads the bundle, allocates the pool): run it
    off the event loop."""
    calibration = load_bundle(bundle_dir, current.calibration.model_fingerprint, kv_bits)
    check_model_shape(calibration, current.num_layers, current.num_kv_heads, current.head_dim)
    _check_budget(calibration, current, budget_bytes)
    return TkvPagedKVCache(
        calibration, num_blocks=current.num_blocks, block_size=current.block_size, device=current.device,
        num_sink_blocks=current.num_sink_blocks, num_tail_slots=current.num_tail_slots,
        exact_blocks=current.exact_blocks,
    )


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
