"""The debug fault seeds: parsed from ARBI_DEBUG_FAULTS (off when unset, a bad value refused by name)."""

from __future__ import annotations

import pytest

from arbi_grpc.engine.fault_injection import FAULTS_ENV, StepFaults
from arbi_grpc.errors import InvalidArgumentError


def test_fault_seeds_come_from_the_environment(monkeypatch) -> None:
    monkeypatch.delenv(FAULTS_ENV, raising=False)
    assert StepFaults.from_environment() == StepFaults()
    monkeypatch.setenv(FAULTS_ENV, " step=7, loop=9 ")
    assert StepFaults.from_environment() == StepFaults(step_seed=7, loop_seed=9)
    for bad in ("step", "step=-1", "crash=3", "step=x"):
        monkeypatch.setenv(FAULTS_ENV, bad)
        with pytest.raises(InvalidArgumentError, match=FAULTS_ENV):
            StepFaults.from_environment()
