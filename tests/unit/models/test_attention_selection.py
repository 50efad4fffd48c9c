"""Backend choices that are not served are refused at boot with the boundary, never silently replaced."""

from __future__ import annotations

import pytest

from arbi_grpc.config import EngineConfig
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.models.attention_selection import select_attention_backend
from arbi_grpc.models.torch_paged_attention import TorchPagedAttention


def test_cpu_gets_the_torch_reference() -> None:
    assert isinstance(select_attention_backend(EngineConfig(device="cpu")), TorchPagedAttention)


def test_flashinfer_is_refused_with_its_boundary() -> None:
    with pytest.raises(NotImplementedError, match="attention backend 'flashinfer': not wired"):
        select_attention_backend(EngineConfig(device="cuda", attention_backend="flashinfer"))


def test_tkv_on_cuda_defaults_to_the_triton_kernels() -> None:
    from arbi_grpc.kv_codec.triton_attention import TkvTritonPagedAttention

    config = EngineConfig(device="cuda", kv_cache_dtype="tkv", kv_calibration="bundle")
    assert isinstance(select_attention_backend(config), TkvTritonPagedAttention)


def test_a_backend_that_cannot_read_tkv_is_refused() -> None:
    config = EngineConfig(device="cuda", kv_cache_dtype="tkv", kv_calibration="bundle", attention_backend="flashinfer")
    with pytest.raises(InvalidArgumentError, match="'flashinfer' cannot read a TKV cache"):
        select_attention_backend(config)
