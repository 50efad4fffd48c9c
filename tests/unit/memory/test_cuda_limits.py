"""The CUDA memory limit: the flag wins; else torch's free plus already-reserved memory of the current
device; else NVML's free memory; else a refusal that names --memory-limit-mib."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.memory import limits

CUDA = EngineConfig(device="cuda")


@pytest.fixture
def no_torch_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_the_flag_wins() -> None:
    limit = limits.memory_limit(EngineConfig(device="cuda", memory_limit_mib=1000))
    assert limit.num_bytes == 1000 * MIB and limit.source == "memory_limit_mib=1000"


def test_free_plus_reserved_of_the_current_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (70 * MIB, 100 * MIB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 20 * MIB)
    limit = limits.memory_limit(CUDA)
    assert limit.num_bytes == 90 * MIB and "cuda:1" in limit.source


def test_nvml_when_torch_sees_no_gpu(monkeypatch: pytest.MonkeyPatch, no_torch_gpu: None) -> None:
    info = SimpleNamespace(used=30 * MIB, free=50 * MIB, total=80 * MIB)
    fake_nvml = SimpleNamespace(
        nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetMemoryInfo=lambda handle: info, nvmlDeviceGetName=lambda handle: b"NVIDIA H200",
    )
    monkeypatch.setattr(limits, "open_nvml", lambda: fake_nvml)
    limit = limits.memory_limit(CUDA)
    assert limit.num_bytes == 50 * MIB and "NVIDIA H200" in limit.source


def test_no_gpu_anywhere_is_refused_naming_the_flag(monkeypatch: pytest.MonkeyPatch, no_torch_gpu: None) -> None:
    monkeypatch.setattr(limits, "open_nvml", lambda: None)
    with pytest.raises(InvalidArgumentError) as refused:
        limits.memory_limit(CUDA)
    assert refused.value.field == "memory_limit_mib" and "--memory-limit-mib" in str(refused.value)
