"""Chooses the KV pool's bytes: an explicit --kv-cache-memory-mib wins (per model); else on the CPU what
--max-running-requests sequences of the context limit need, within a share of the memory the other components
leave; on CUDA what the other components leave under --gpu-memory-utilization. The choice carries its reason for
the boot log, `plan` and the memory report, as does the running batch limit a default --max-running-requests
(auto) takes from that pool (`running_requests.py`).

With several chat models the default pools split what is free equally: a model loading before `pending`
others (the boot's later --model entries, estimated without their pools) counts them and every resident model
among the other components and takes 1/(len(pending) + 1) of the room its rule leaves. At boot the N models
thus get equal room (N models of one shape, equal pools); an admin LoadModel has no pending model and takes
what is left.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.errors import ResourceExhaustedError
from arbi_grpc.memory.budget import MemoryComponent, MemoryLimit
from arbi_grpc.memory.estimate import estimate_budget
from arbi_grpc.memory.kv_pool import KVPoolBudget, KVPoolPlan, kv_block_bytes, plan_kv_pool
from arbi_grpc.memory.residents import is_chat_model, with_residents
from arbi_grpc.memory.running_requests import choose_running_requests
from arbi_grpc.models.config import ModelConfig

if TYPE_CHECKING:
    from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration

# Of the host memory left after the weights and activations, the most a default CPU pool takes: the rest stays
# for the tokenizer, gRPC, the gateway and whatever else runs on the machine (a laptop runs more than the
# server). A tenth keeps the embedded model's default server near 2 GiB on a 24 GiB machine.
CPU_FREE_MEMORY_SHARE = 0.1


def choose_kv_pool_budget(
    config: EngineConfig, limit: MemoryLimit, other_bytes: int, sequence_bytes: int, share: int = 1
) -> KVPoolBudget:
    """The pool's budget for `config`, given the memory `limit`, the bytes of every other component
    (`other_bytes`: weights, activations, CUDA graphs, the other resident models, ...), what one sequence of the
    context limit costs in the pool (`sequence_bytes`) and how many chat models still to load share the room
    (`share`). Raises ResourceExhaustedError when the others leave nothing."""
    if config.kv_cache_memory_mib:
        return KVPoolBudget(config.kv_cache_memory_bytes, f"kv_cache_memory_mib={config.kv_cache_memory_mib}")
    split = f", split 1/{share} among the chat models still to load" if share > 1 else ""
    if config.device == "cuda":
        allowed = int(limit.num_bytes * config.gpu_memory_utilization)
        room = allowed - other_bytes
        _require_room(room, other_bytes, allowed, f"gpu_memory_utilization={config.gpu_memory_utilization}")
        return KVPoolBudget(room // share, f"what the other components ({other_bytes / MIB:,.1f} MiB) leave of "
                                           f"gpu_memory_utilization={config.gpu_memory_utilization} x "
                                           f"{limit.num_bytes / MIB:,.0f} MiB ({limit.source}){split}")
    room = limit.num_bytes - other_bytes
    _require_room(room, other_bytes, limit.num_bytes, limit.source)
    share_bytes = int(room * CPU_FREE_MEMORY_SHARE) // share
    needed = config.max_running_requests * sequence_bytes
    if needed <= share_bytes:
        return KVPoolBudget(needed, f"max_running_requests={config.max_running_requests} sequences of the context "
                                    f"limit ({sequence_bytes / MIB:,.1f} MiB each)")
    return KVPoolBudget(share_bytes, f"{CPU_FREE_MEMORY_SHARE:.0%} of the {room / MIB:,.0f} MiB the other components "
                                     f"leave ({limit.source}){split}; {config.max_running_requests} full-context "
                                     f"sequences would need {needed / MIB:,.0f} MiB")


def _require_room(room: int, other_bytes: int, allowed: int, source: str) -> None:
    if room <= 0:
        raise ResourceExhaustedError(
            f"memory budget: no room for a KV cache: the other components take {other_bytes / MIB:,.1f} MiB of "
            f"{allowed / MIB:,.1f} MiB ({source}); set --kv-cache-memory-mib, lower --max-step-tokens, or raise "
            "--memory-limit-mib"
        )


def plan_default_kv_pool(
    config: EngineConfig, model: ModelConfig, limit: MemoryLimit, tkv_calibration: TkvCalibration | None = None,
    host_components: tuple[MemoryComponent, ...] = (), residents: tuple[MemoryComponent, ...] = (), pending: tuple[MemoryComponent, ...] = (),
    subject: str = "",
) -> KVPoolPlan:
    """`plan_kv_pool` under the budget `choose_kv_pool_budget` picks; the other components are estimated as a
    boot of `config` would (`estimate_budget` with an empty pool and the server's `host_components`), after the
    `residents` (the server's other models), leaving room for and splitting with the `pending` chat models still
    to load; `subject` names the model in a budget error. The plan carries the running batch limit it was made for
    (`running_requests.choose_running_requests` resolves auto): load with `config.with_running_requests` of it."""
    context = config.max_model_len or model.max_position_embeddings
    block_bytes = kv_block_bytes(config, model, tkv_calibration)
    empty_pool = KVPoolPlan(0, config.block_size, block_bytes, context)
    sequence_bytes = -(-context // config.block_size) * block_bytes

    def budget_for(candidate: EngineConfig) -> KVPoolBudget:
        others = with_residents(estimate_budget(candidate, model, empty_pool, limit, host_components), subject,
                                residents)
        others.check_fits()  # names the component past the limit when the others alone do not fit
        other_bytes = others.total_bytes + sum(component.num_bytes for component in pending)
        return choose_kv_pool_budget(candidate, limit, other_bytes, sequence_bytes, len(pending) + 1)

    beside = bool(pending) or any(is_chat_model(component) for component in residents)
    running = choose_running_requests(config, model, tkv_calibration, budget_for, beside)
    resolved = config.with_running_requests(running.count)
    return replace(plan_kv_pool(resolved, model, tkv_calibration, budget_for(resolved)), running_source=running.source)
