"""Launching a step never makes the host wait for the GPU: every launch of prefill, mixed and decode steps runs
under torch's sync debug mode set to "error", so any synchronizing call (a pageable copy, `.item()`, a blocking
device-to-host read) fails the engine step. Reading the sampled tokens happens after the launch and is allowed."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.model_runner import ModelRunner
from arbi_grpc.engine.offline import generate
from arbi_grpc.engine.request import FinishReason
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.models.reference_shapes import model_config_for_shape
from tests.gpu.engine_pair import build_engine, greedy_requests


@pytest.mark.parametrize("graph_batch", [0, 16])
def test_launches_of_prefill_mixed_and_decode_steps_never_wait(graph_batch: int, monkeypatch) -> None:
    launched = []
    launch = ModelRunner.launch

    def launch_refusing_host_waits(self, step, previous):
        torch.cuda.set_sync_debug_mode("error")
        try:
            return launch(self, step, previous)
        finally:
            torch.cuda.set_sync_debug_mode("default")
            launched.append(sorted(chunk.num_tokens for chunk in step.chunks))

    monkeypatch.setattr(ModelRunner, "launch", launch_refusing_host_waits)
    config = model_config_for_shape("smollm2-135m")
    engine_config = EngineConfig(device="cuda", dtype="bfloat16", max_model_len=512, max_running_requests=16,
                                 max_step_tokens=96, max_prefill_chunk_tokens=64, enable_prefix_cache=True,
                                 kv_cache_memory_mib=512, cuda_graph_max_batch=graph_batch)
    engine = build_engine(random_causal_lm(config, torch.bfloat16, "cuda", seed=5), config, engine_config)
    try:
        generator = torch.Generator().manual_seed(7)
        prompts = [torch.randint(0, config.vocab_size, (n,), generator=generator).tolist()
                   for n in (3, 150, 40, 1, 90, 17)]
        done = generate(engine, greedy_requests(prompts, 12))
    finally:
        engine.shutdown()
    assert [r.finish_reason for r in done] == [FinishReason.MAX_OUTPUT_TOKENS] * len(prompts)
    assert all(len(r.token_ids) == 12 for r in done)
    assert any(len(sizes) > 1 and max(sizes) > 1 and min(sizes) == 1 for sizes in launched), "no mixed step"
    assert any(max(sizes) > 1 for sizes in launched) and any(max(sizes) == 1 for sizes in launched)
