"""The audio models' host memory: an estimate from their files, counted in a CPU engine's budget (not in a GPU
one's), refused by name when it cannot fit, and replaced by the measured growth once they load."""

from __future__ import annotations

import pytest

from arbi_grpc.audio.memory import (
    RESIDENT_BYTES_PER_FILE_BYTE,
    audio_model_files,
    estimated_audio_component,
    measured_audio_component,
)
from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.errors import InvalidArgumentError, ResourceExhaustedError
from arbi_grpc.memory.budget import MemoryLimit
from arbi_grpc.memory.estimate import estimate_budget
from arbi_grpc.memory.kv_pool import plan_kv_pool
from arbi_grpc.server_config import ServerConfig
from tests.unit.memory.shapes import model_config


def test_the_estimate_scales_the_bundled_model_files() -> None:
    file_bytes = sum(path.stat().st_size for path in audio_model_files())
    assert file_bytes > 100 * MIB  # the recognizer and the voice are tens of MiB each
    component = estimated_audio_component()
    assert component is not None and component.name == "audio_models"
    assert component.num_bytes == int(file_bytes * RESIDENT_BYTES_PER_FILE_BYTE)


def test_the_measured_reservation_never_falls_below_the_estimate() -> None:
    estimate = estimated_audio_component()
    assert measured_audio_component(1 * MIB).num_bytes == estimate.num_bytes
    assert measured_audio_component(estimate.num_bytes + MIB).num_bytes == estimate.num_bytes + MIB


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_cpu_engine_budget_counts_the_audio_models_and_a_gpu_one_does_not(device: str) -> None:
    config = EngineConfig(model="m", device=device, dtype="float32", kv_cache_memory_mib=4)
    model = model_config()
    audio = estimated_audio_component()
    budget = estimate_budget(config, model, plan_kv_pool(config, model), MemoryLimit(64 * 1024 * MIB, "test"),
                             (audio,))
    names = [component.name for component in budget.components]
    assert ("audio_models" in names) == (device == "cpu")


def test_a_budget_the_audio_models_overflow_names_them_and_the_flag() -> None:
    config = EngineConfig(model="m", dtype="float32", kv_cache_memory_mib=4)
    model = model_config()
    audio = estimated_audio_component()
    without = estimate_budget(config, model, plan_kv_pool(config, model), MemoryLimit(64 * 1024 * MIB, "test"))
    limit = MemoryLimit(without.total_bytes + audio.num_bytes - 1, "test")
    budget = estimate_budget(config, model, plan_kv_pool(config, model), limit, (audio,))
    with pytest.raises(ResourceExhaustedError, match=r"audio_models .*--no-audio"):
        budget.check_fits()


def test_preloading_audio_that_is_turned_off_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="audio_preload"):
        ServerConfig(audio=False, audio_preload=True)
