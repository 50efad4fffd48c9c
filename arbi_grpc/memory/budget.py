"""The memory budget: what each component of a server holds, and the check that their sum fits the memory
available. The same type carries the estimate (`plan`, before loading) and the measurement (after boot).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from arbi_grpc.config import MIB
from arbi_grpc.errors import ResourceExhaustedError


@dataclass(frozen=True)
class MemoryComponent:
    """One part of the budget: its bytes, how they are made up, and what shrinks it."""

    name: str
    num_bytes: int
    detail: str
    remedy: str


@dataclass(frozen=True)
class MemoryLimit:
    """The bytes a budget must fit in, and where that number came from."""

    num_bytes: int
    source: str


@dataclass(frozen=True)
class MemoryBudget:
    """Components in the order a boot allocates them, checked against `limit`.

    `method` is "estimated" (from config files, nothing loaded) or "measured" (tensors held after boot plus
    the profiled activation peak).
    """

    device: str
    method: str
    components: tuple[MemoryComponent, ...]
    limit: MemoryLimit
    subject: str = ""  # what the budget is checked for, e.g. "model 'chat'" (named in the error)

    @property
    def total_bytes(self) -> int:
        return sum(component.num_bytes for component in self.components)

    @property
    def limit_bytes(self) -> int:
        return self.limit.num_bytes

    def component(self, name: str) -> MemoryComponent:
        for component in self.components:
            if component.name == name:
                return component
        raise KeyError(name)

    def check_fits(self) -> None:
        """Raises ResourceExhaustedError naming the component that pushes the total over the limit."""
        running_total = 0
        for component in self.components:
            running_total += component.num_bytes
            if running_total > self.limit.num_bytes:
                of = f" of {self.subject}" if self.subject else ""
                raise ResourceExhaustedError(
                    f"memory budget ({self.method}, {self.device}){of} does not fit: {self.summary()}; "
                    f"{component.name} ({component.detail}) takes the total past the limit; {component.remedy}"
                )

    def summary(self) -> str:
        parts = " + ".join(f"{c.name} {_mib(c.num_bytes)}" for c in self.components)
        return f"{parts} = {_mib(self.total_bytes)} of {_mib(self.limit.num_bytes)} ({self.limit.source})"

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form for logs and `plan --json`."""
        return {
            "device": self.device,
            "method": self.method,
            "components": {c.name: {"bytes": c.num_bytes, "detail": c.detail} for c in self.components},
            "total_bytes": self.total_bytes,
            "limit_bytes": self.limit.num_bytes,
            "limit_source": self.limit.source,
        }


def _mib(num_bytes: int) -> str:
    return f"{num_bytes / MIB:,.1f} MiB"


def weights_component(num_bytes: int, detail: str) -> MemoryComponent:
    return MemoryComponent("weights", num_bytes, detail,
                           "serve a smaller model, use --dtype bfloat16, or raise --memory-limit-mib")


def kv_cache_component(num_bytes: int, detail: str) -> MemoryComponent:
    return MemoryComponent("kv_cache", num_bytes, detail, "lower --kv-cache-memory-mib")


def activations_component(num_bytes: int, detail: str) -> MemoryComponent:
    return MemoryComponent("activations", num_bytes, detail,
                           "lower --max-step-tokens or --max-running-requests")


def codec_scratch_component(num_bytes: int, detail: str) -> MemoryComponent:
    return MemoryComponent("codec_scratch", num_bytes, detail,
                           "serve without the TKV codec (--kv-cache-dtype auto) or raise --memory-limit-mib")


def cuda_graphs_component(num_bytes: int, detail: str) -> MemoryComponent:
    return MemoryComponent("cuda_graphs", num_bytes, detail,
                           "lower --cuda-graph-max-batch (0 turns CUDA graphs off)")


def audio_models_component(num_bytes: int, detail: str) -> MemoryComponent:
    return MemoryComponent("audio_models", num_bytes, detail,
                           "serve without AudioService (--no-audio) or raise --memory-limit-mib")


def allocator_overhead_component(num_bytes: int, detail: str) -> MemoryComponent:
    return MemoryComponent("allocator_overhead", num_bytes, detail,
                           "lower --kv-cache-memory-mib or --max-step-tokens to make room, or raise --memory-limit-mib")
