"""One memory budget for every model a server holds: each resident chat model and embedding model is one
component of the budget a new load is checked against, ahead of the new model's own components (they were
allocated first), so a load that cannot fit names the new model and the component that crosses the limit.

A chat model's component is what its own budget measured at its load (the host components such as the audio
models are counted once, in each budget's own list); an embedding model's is its weights plus the activation
working set of its largest padded chunk (`embeddings/memory.py`).
"""

from __future__ import annotations

import dataclasses

from arbi_grpc.config import MIB
from arbi_grpc.memory.budget import MemoryBudget, MemoryComponent


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


def embedding_model_component(name: str, weight_bytes: int, activation_bytes: int, detail: str) -> MemoryComponent:
    return MemoryComponent(
        f"embedding {name}", weight_bytes + activation_bytes,
        f"resident embedding model: weights {weight_bytes / MIB:,.1f} MiB + activations "
        f"{activation_bytes / MIB:,.1f} MiB ({detail})",
        f"unload embedding model {name!r} (AdminService.UnloadModel) or serve fewer models",
    )
