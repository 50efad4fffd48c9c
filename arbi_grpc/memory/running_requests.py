"""Chooses the running batch limit when --max-running-requests is left at 0 (auto): as many sequences of
TYPICAL_SEQUENCE_TOKENS tokens (the context, if shorter) as the KV pool holds, each with its TKV tail slot, within
AUTO_RUNNING_REQUESTS_FLOOR..AUTO_RUNNING_REQUESTS_CAP and --max-step-tokens (a decode step takes one token of
each running sequence). The pool is counted in blocks of the storage in force, so a TKV pool's codes buy several
times the sequences of a bf16 pool of equal bytes.

What each running sequence costs besides its blocks is priced in the plan it is chosen with: its tail slot (TKV:
`kv_exact_blocks` fp16 blocks over all layers, in the pool's bytes), a batch slot, a CUDA graph up to the graph
batch limit (its kept logits, in the estimate of the other components a default CUDA pool leaves room for) and a
sampled row of the profiled step. On the CPU a default pool is sized from the limit itself (`kv_pool_default`), so
auto keeps the floor there, as it does for a default pool that splits the device with other chat models (each is
estimated at the floor before it loads, `residents.pending_model_component`). A TKV pool too small for the floor's tail slots beside one sequence of the context
limit gets as many slots as leave it that sequence, rather than refusing the boot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from arbi_grpc.config import AUTO_RUNNING_REQUESTS_FLOOR, TYPICAL_SEQUENCE_TOKENS, EngineConfig
from arbi_grpc.errors import ResourceExhaustedError
from arbi_grpc.memory.kv_pool import KVPoolBudget, pool_block_count
from arbi_grpc.models.config import ModelConfig

if TYPE_CHECKING:
    from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration


@dataclass(frozen=True)
class RunningRequests:
    """The running batch limit and how it was chosen (for the boot log, `plan` and the memory report)."""

    count: int
    source: str


def choose_running_requests(
    config: EngineConfig, model: ModelConfig, tkv_calibration: TkvCalibration | None,
    budget_for: Callable[[EngineConfig], KVPoolBudget], beside_chat_models: bool = False,
) -> RunningRequests:
    """`config.max_running_requests` when set; else the most sequences of the typical length whose blocks the pool
    that `budget_for` gives a config of that limit holds (the budget may shrink as the limit grows, by the CUDA
    graphs it prices). A limit whose other components do not fit (ResourceExhaustedError from `budget_for`) holds
    none; the floor's own plan is made by the caller, which reports such an error. A default pool loaded
    `beside_chat_models` (others resident or still to load) takes the floor: the default pools split the device
    equally only if every model's other components are what the split estimated."""
    if not config.running_requests_auto:
        return RunningRequests(config.max_running_requests, f"max_running_requests={config.max_running_requests}")
    cap = config.max_running_requests_bound
    floor = min(AUTO_RUNNING_REQUESTS_FLOOR, cap)
    if config.device == "cpu" and not config.kv_cache_memory_mib:
        return RunningRequests(floor, f"auto: {floor} on the CPU, where the default KV pool is sized from it")
    if beside_chat_models and not config.kv_cache_memory_mib:
        return RunningRequests(floor, f"auto: {floor} beside other chat models, with which the default KV pool "
                                      "splits the device")
    typical = min(TYPICAL_SEQUENCE_TOKENS, config.max_model_len or model.max_position_embeddings)
    typical_blocks = -(-typical // config.block_size)
    # What the plan requires of a pool: one sequence of --max-model-len; without it one block (the context limit
    # is then capped at the pool).
    context_blocks = -(-(config.max_model_len or 1) // config.block_size)

    def holds(count: int, blocks_each: int, sequences: int) -> bool:
        candidate = config.with_running_requests(count)
        try:
            budget = budget_for(candidate)
        except ResourceExhaustedError:
            return False  # this limit's other components leave no pool: it holds no sequence
        return pool_block_count(candidate, model, tkv_calibration, budget.num_bytes) >= sequences * blocks_each

    bounds = f"within {floor}..{cap}"
    if holds(floor, typical_blocks, floor):
        count = _largest(floor, cap, lambda n: holds(n, typical_blocks, n))
        reason = "the cap" if count == cap else f"the sequences of {typical} tokens the KV pool holds"
        return RunningRequests(count, f"auto: {reason}, {bounds}")
    if holds(floor, context_blocks, 1) or not holds(1, context_blocks, 1):
        return RunningRequests(floor, f"auto: the floor, {bounds}; the KV pool holds fewer sequences of {typical} "
                                      "tokens")
    # The floor's tail slots leave no room for one sequence of the context limit (a small TKV pool): fewer slots.
    count = _largest(1, floor - 1, lambda n: holds(n, context_blocks, 1))
    return RunningRequests(count, f"auto: below the floor of {floor}, the most whose TKV tail slots leave the KV pool "
                                  "one sequence of the context limit")


def _largest(low: int, high: int, allowed: Callable[[int], bool]) -> int:
    """The largest n in [low, high] with allowed(n), given allowed(low) and that allowed only turns false."""
    while low < high:
        middle = (low + high + 1) // 2
        if allowed(middle):
            low = middle
        else:
            high = middle - 1
    return low
