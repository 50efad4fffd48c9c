"""The memory budget gauges of the session server add up to the tensors its engine holds (weights and the
KV pool, counted here from the live objects) plus the activation peak profiled at boot."""

from __future__ import annotations

import torch

from arbi_grpc.config import MIB


def _distinct_storage_bytes(tensors: list[torch.Tensor]) -> int:
    storages = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def test_budget_gauges_sum_to_what_the_engine_holds(served_smollm2) -> None:
    served = served_smollm2.served
    runner = served.engine.runner
    weights = _distinct_storage_bytes([*runner.model.parameters(), *runner.model.buffers()])
    kv_cache = _distinct_storage_bytes([*runner.kv_cache.key_caches, *runner.kv_cache.value_caches])
    registry = served_smollm2.metrics.registry
    gauges = {component.name: registry.get_sample_value("arbi_memory_budget_bytes",
                                                        {"component": component.name, "model": served.name})
              for component in served.memory_budget.components}
    # A model an admin test reloaded came from the server's loader, which also reserves the audio models.
    audio = gauges.get("audio_models", 0)

    assert gauges["weights"] == weights == 96_576_768  # as stored in the GGUF import (test_admin_api.py)
    assert gauges["kv_cache"] == kv_cache == served.config.kv_cache_memory_mib * MIB // (720 * 1024) * 720 * 1024
    # The activation peak holds at least the float32 logits of a full step.
    assert gauges["activations"] >= served.config.max_step_tokens * served.model_config.vocab_size * 4
    assert set(gauges) <= {"weights", "kv_cache", "codec_scratch", "activations", "audio_models"}
    assert sum(gauges.values()) == weights + kv_cache + gauges["activations"] + gauges.get("codec_scratch", 0) + audio \
        == served.memory_budget.total_bytes
    assert registry.get_sample_value("arbi_memory_limit_bytes", {"model": served.name}) >= sum(gauges.values())
