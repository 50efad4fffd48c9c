"""The budget check names the component that takes the total past the limit, with the numbers."""

from __future__ import annotations

import pytest

from arbi_grpc.config import MIB
from arbi_grpc.errors import ResourceExhaustedError
from arbi_grpc.memory.budget import (
    MemoryBudget,
    MemoryLimit,
    activations_component,
    kv_cache_component,
    weights_component,
)


def _budget(limit_mib: int) -> MemoryBudget:
    return MemoryBudget(
        device="cpu", method="estimated",
        components=(weights_component(100 * MIB, "w"), kv_cache_component(50 * MIB, "kv"),
                    activations_component(25 * MIB, "a")),
        limit=MemoryLimit(limit_mib * MIB, f"memory_limit_mib={limit_mib}"),
    )


@pytest.mark.parametrize(("limit_mib", "culprit", "remedy"), [
    (99, "weights", "--dtype bfloat16"),
    (149, "kv_cache", "--kv-cache-memory-mib"),
    (174, "activations", "--max-step-tokens"),
])
def test_the_component_that_crosses_the_limit_is_named(limit_mib: int, culprit: str, remedy: str) -> None:
    with pytest.raises(ResourceExhaustedError) as refused:
        _budget(limit_mib).check_fits()
    message = str(refused.value)
    assert f"{culprit} (" in message and remedy in message
    assert "175.0 MiB" in message and f"{limit_mib}.0 MiB" in message


def test_a_budget_at_the_limit_fits_and_reports_its_parts() -> None:
    budget = _budget(175)
    budget.check_fits()
    assert budget.total_bytes == 175 * MIB
    document = budget.as_dict()
    assert document["components"]["kv_cache"]["bytes"] == 50 * MIB
    assert document["limit_source"] == "memory_limit_mib=175"
