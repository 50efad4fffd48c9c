"""The engine's hook for metrics: what the engine thread reports while it runs, and a no-op default.

Every call comes from the engine thread. Implementations must be quick and must never block: no I/O, no
lock that another thread holds for long (prometheus_client's per-metric locks are held for an add only).
"""

from __future__ import annotations

from typing import Protocol

from arbi_grpc.engine.request import RequestOutput


class EngineObserver(Protocol):
    """Request and step events, in the order the engine sees them.

    A request goes: `request_added` -> `request_scheduled` (each step it runs in) -> `token_emitted` (per
    sampled token) -> `request_finished` (once: finished, cancelled, failed or aborted at shutdown).
    `step_finished` closes every step that ran the model.
    """

    def request_added(self, request_id: str, arrival_s: float, num_prompt_tokens: int, tenant: str) -> None:
        """The engine took a request of `tenant` (its prefix-cache namespace) submitted at `arrival_s`
        (time.monotonic())."""

    def request_scheduled(self, request_id: str) -> None:
        """The request has a chunk in the step about to run."""

    def token_emitted(self, request_id: str) -> None:
        """A sampled token of the request was appended to its output."""

    def request_finished(self, request_id: str, output: RequestOutput) -> None:
        """The request's last output (finish reason or error) is being delivered."""

    def step_finished(self, num_sequences: int, num_tokens: int, duration_s: float) -> None:
        """A step ran `num_sequences` chunks of `num_tokens` tokens in all, scheduling to last output."""


class NoEngineObserver:
    """Ignores every event: the engine's default when nothing watches it."""

    def request_added(self, request_id: str, arrival_s: float, num_prompt_tokens: int, tenant: str) -> None:
        pass

    def request_scheduled(self, request_id: str) -> None:
        pass

    def token_emitted(self, request_id: str) -> None:
        pass

    def request_finished(self, request_id: str, output: RequestOutput) -> None:
        pass

    def step_finished(self, num_sequences: int, num_tokens: int, duration_s: float) -> None:
        pass
