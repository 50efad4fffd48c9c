"""One memory budget for every model a server holds: each resident chat model and embedding model is one
component of the budget a new load is checked against, ahead of the new model's own components (they were
allocated first), so a load that cannot fit names the new model and the component that crosses the limit.

A chat model still to load is estimated with an empty KV pool (`pending_model_component`): default KV pools
leave room for those and split the rest (`kv_pool_default.py`).

A resident chat model's component is what its own budget measured at its load (the host components such as the audio
models are counted once, in each budget's own list); an embedding model's is its weights plus the activation
working set of its largest padded chunk (`embeddings/memory.py`).
"""

from __future__ import annotations

import dataclasses

from arbi_grpc.config import AUTO_RUNNING_REQUESTS_FLOOR, MIB, EngineConfig
from arbi_grpc.memory.budget import MemoryBudget, MemoryComponent, MemoryLimit
from arbi_grpc.memory.estimate import estimate_budget
from arbi_grpc.memory.kv_pool import KVPoolPlan, kv_block_bytes
from arbi_grpc.models.config import ModelConfig


def with_residents(budget: MemoryBudget, subject: str, residents: tuple[MemoryComponent, ...]) -> MemoryBudget:
    """`budget` of `subject` (e.g. "model 'chat'") with the residents' components ahead of its own."""
    return dataclasses.replace(budget, components=(*residents, *budget.components), subject=subject)


def chat_model_component(name: str, budget: MemoryBudget, shared: tuple[str, ...]) -> MemoryComponent:
    """A resident chat model as one component: its budget's components except the `shared` ones (host
    components every budget lists, e.g. "audio_models")."""
    own = [c for c in budget.components if c.name not in shared]
    return MemoryComponent(
        f"model {name}", sum(c.num_bytes for c in own),
        f"resident chat model ({budget.method}): " + " + ".join(f"{c.name} {c.num_bytes / MIB:,.1f} MiB" for c in own),
        f"unload model {name!r} (AdminService.UnloadModel) or serve fewer models",
    )


def is_chat_model(component: MemoryComponent) -> bool:
    """Whether a resident component is a chat model's (`chat_model_component`)."""
    return component.name.startswith("model ")


def pending_model_component(name: str, config: EngineConfig, model: ModelConfig, limit: MemoryLimit,
                            host_components: tuple[MemoryComponent, ...] = ()) -> MemoryComponent:
    """A chat model still to load, estimated with an empty KV pool (its pool is what the split gives it); an auto
    running limit at what it will take: the floor with a default pool (it loads beside another chat model,
    `running_requests.py`), else the most it may become."""
    if config.running_requests_auto:
        config = config.with_running_requests(
            config.max_running_requests_bound if config.kv_cache_memory_mib
            else min(AUTO_RUNNING_REQUESTS_FLOOR, config.max_running_requests_bound))
    context = config.max_model_len or model.max_position_embeddings
    empty_pool = KVPoolPlan(0, config.block_size, kv_block_bytes(config, model), context)
    budget = estimate_budget(config, model, empty_pool, limit, host_components)
    return chat_model_component(name, budget, tuple(component.name for component in host_components))


def embedding_model_component(name: str, weight_bytes: int, activation_bytes: int, detail: str) -> MemoryComponent:
    return MemoryComponent(
        f"embedding {name}", weight_bytes + activation_bytes,
        f"resident embedding model: weights {weight_bytes / MIB:,.1f} MiB + activations "
        f"{activation_bytes / MIB:,.1f} MiB ({detail})",
        f"unload embedding model {name!r} (AdminService.UnloadModel) or serve fewer models",
    )
