"""Debug fault injection: engine faults a client triggers through the real API, for the fault tests and the
soak harness. Never set in production.

Off unless the environment variable `ARBI_DEBUG_FAULTS` is set when an engine's step loop is built, to
comma-separated `kind=seed` pairs, e.g. `step=7001,loop=7002`. A step that schedules a request whose
`sampling.seed` is the `step` seed raises inside the step's launch, as a device error would: that step's
requests end INTERNAL (`ENGINE_STEP_FAILED`) and the engine goes on. One whose seed is the `loop` seed raises
in the loop outside any step, as a broken scheduler invariant would: the engine thread dies, health turns
NOT_SERVING and `arbi-serve serve` exits non-zero.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from arbi_grpc.engine.scheduler import ScheduledStep
from arbi_grpc.errors import InvalidArgumentError

FAULTS_ENV = "ARBI_DEBUG_FAULTS"
_KINDS = ("step", "loop")


class InjectedFault(RuntimeError):
    """The fault a debug seed asked for."""


@dataclass(frozen=True)
class StepFaults:
    """The seeds that trigger each kind of fault (None: that kind off)."""

    step_seed: int | None = None
    loop_seed: int | None = None

    @classmethod
    def from_environment(cls) -> StepFaults:
        text = os.environ.get(FAULTS_ENV, "").strip()
        seeds: dict[str, int] = {}
        for pair in filter(None, (part.strip() for part in text.split(","))):
            kind, _, seed = pair.partition("=")
            if kind not in _KINDS or not seed.isdigit():
                raise InvalidArgumentError(FAULTS_ENV, f"must be comma-separated kind=seed pairs with a kind in "
                                                       f"{', '.join(_KINDS)}, got {pair!r}")
            seeds[f"{kind}_seed"] = int(seed)
        return cls(**seeds)

    def before_launch(self, step: ScheduledStep) -> None:
        """Raises the `loop` fault when the step schedules its seed."""
        self._raise_for(step, self.loop_seed, "loop")

    def in_launch(self, step: ScheduledStep) -> None:
        """Raises the `step` fault when the step schedules its seed."""
        self._raise_for(step, self.step_seed, "step")

    @staticmethod
    def _raise_for(step: ScheduledStep, seed: int | None, kind: str) -> None:
        if seed is not None and any(chunk.sequence.request.sampling.seed == seed for chunk in step.chunks):
            raise InjectedFault(f"injected {kind} fault ({FAULTS_ENV}, sampling seed {seed})")
