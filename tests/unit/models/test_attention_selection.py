"""Backend choices that are not served are refused at boot with the boundary, never silently replaced."""

from __future__ import annotations

import pytest

from arbi_grpc.config import EngineConfig
from arbi_grpc.models.attention_selection import select_attention_backend
from arbi_grpc.models.torch_paged_attention import TorchPagedAttention


def test_cpu_gets_the_torch_reference() -> None:
    assert isinstance(select_attention_backend(EngineConfig(device="cpu")), TorchPagedAttention)


def test_flashinfer_is_refused_with_its_boundary() -> None:
    with pytest.raises(NotImplementedError, match="attention backend 'flashinfer': not wired"):
        select_attention_backend(EngineConfig(device="cuda", attention_backend="flashinfer"))


def test_tkv_on_cuda_is_refused_with_its_boundary() -> None:
    config = EngineConfig(device="cuda", kv_cache_dtype="tkv", kv_calibration="bundle")
    with pytest.raises(NotImplementedError, match="kv_cache_dtype 'tkv' on cuda: not served yet"):
        select_attention_backend(config)
