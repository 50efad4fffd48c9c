"""The scheduling settings an administrator may change while the server runs (AdminService runtime config).

A frozen dataclass mirroring the matching EngineConfig fields; `check` lists every violation of a set of
values so an update is refused whole, naming each bad field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from arbi_grpc.config import EngineConfig
from arbi_grpc.errors import InvalidArgumentError


@dataclass(frozen=True)
class RuntimeSettings:
    """Scheduling limits of the engine, applied from its next step."""

    max_running_requests: int
    max_step_tokens: int
    max_waiting_requests: int
    default_max_output_tokens: int
    max_prefill_chunk_tokens: int

    def __post_init__(self) -> None:
        problems = self.check(dataclasses.asdict(self))
        if problems:
            raise InvalidArgumentError(*problems[0])

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(field.name for field in dataclasses.fields(cls))

    @classmethod
    def check(cls, values: Mapping[str, int]) -> list[tuple[str, str]]:
        """(field, description) for each unknown name or value out of range; empty when all are fine."""
        problems = []
        for name, value in values.items():
            if name not in cls.names():
                problems.append((name, f"{name!r} is not a runtime setting; known: {', '.join(cls.names())}"))
            elif value <= 0:
                problems.append((name, f"must be > 0, got {value}"))
        return problems

    @classmethod
    def of(cls, config: EngineConfig) -> RuntimeSettings:
        return cls(**{name: getattr(config, name) for name in cls.names()})
