"""Backend choices that are not served are refused at boot with the boundary, never silently replaced."""

from __future__ import annotations

import sys
import types

import pytest

from arbi_grpc.attention.selection import select_attention_backend
from arbi_grpc.attention.torch_paged import TorchPagedAttention
from arbi_grpc.config import EngineConfig
from arbi_grpc.errors import InvalidArgumentError, MissingDependencyError


def test_cpu_gets_the_torch_reference() -> None:
    assert isinstance(select_attention_backend(EngineConfig(device="cpu")), TorchPagedAttention)


def test_flashinfer_without_its_package_is_refused_with_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # `import flashinfer` raises ImportError
    with pytest.raises(MissingDependencyError, match=r"install flashinfer-python==0\.6\.13") as refused:
        select_attention_backend(EngineConfig(device="cuda", attention_backend="flashinfer"))
    assert refused.value.code == "FAILED_PRECONDITION"
    assert "--attention-backend triton" in str(refused.value)


def test_flashinfer_serves_only_bfloat16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    config = EngineConfig(device="cuda", attention_backend="flashinfer", dtype="float32")
    with pytest.raises(InvalidArgumentError, match="'flashinfer' is wired for bfloat16 activations and KV cache"):
        select_attention_backend(config)
    # A KV cache in another dtype than the weights is refused by the config already, for every kernel backend.
    with pytest.raises(InvalidArgumentError, match="'flashinfer' attention kernels read a KV cache in the weights'"):
        EngineConfig(device="cuda", attention_backend="flashinfer", dtype="bfloat16", kv_cache_dtype="float32")


def test_flashinfer_is_served_when_it_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    from arbi_grpc.attention.flashinfer_paged import FlashInferPagedAttention

    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    backend = select_attention_backend(EngineConfig(device="cuda", attention_backend="flashinfer"))
    assert isinstance(backend, FlashInferPagedAttention)
    assert not backend.cuda_graph_safe  # serving then runs decode steps eagerly, without captured graphs


def test_tkv_on_cuda_defaults_to_the_triton_kernels() -> None:
    from arbi_grpc.kv_codec.triton_attention import TkvTritonPagedAttention

    config = EngineConfig(device="cuda", kv_cache_dtype="tkv", kv_calibration="bundle")
    assert isinstance(select_attention_backend(config), TkvTritonPagedAttention)


def test_a_backend_that_cannot_read_tkv_is_refused() -> None:
    config = EngineConfig(device="cuda", kv_cache_dtype="tkv", kv_calibration="bundle", attention_backend="flashinfer")
    with pytest.raises(InvalidArgumentError, match="'flashinfer' cannot read a TKV cache"):
        select_attention_backend(config)
