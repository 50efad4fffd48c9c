"""An unexpected error inside the engine loop: every stream ends with INTERNAL, queued tasks are answered,
new submits and calls are refused with UNAVAILABLE naming the cause, and `on_failure` fires once."""

from __future__ import annotations

import threading

import pytest
import torch

from arbi_grpc.attention.selection import build_kv_cache
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.request import GenerationRequest, RequestOutput
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.errors import UnavailableError
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.served_model import assemble_engine, build_runner
from benchmarks.gpu_decode import synthetic_tokenizer
from tests.unit.engine.tiny_llama import tiny_llama_config

TINY = tiny_llama_config(num_layers=1, max_positions=256)


def _engine() -> Engine:
    config = EngineConfig(device="cpu", max_model_len=128, max_running_requests=4, block_size=4)
    model = random_causal_lm(TINY, torch.float32, "cpu", seed=1)
    runner, _ = build_runner(model, build_kv_cache(config, TINY, num_blocks=64), config, 128,
                             model.model.layers[0].self_attn.backend)
    return assemble_engine(runner, TINY, synthetic_tokenizer(TINY.vocab_size), config, 128)


def _request(request_id: str) -> GenerationRequest:
    return GenerationRequest(request_id, (5, 6, 7), SamplingParams(temperature=0.0),
                             StoppingParams(max_output_tokens=50, ignore_eos=True))


def test_a_failing_loop_ends_every_stream_and_refuses_new_work() -> None:
    engine = _engine()
    finished: dict[str, RequestOutput] = {}
    all_finished = threading.Event()
    failures: list[UnavailableError] = []
    engine.on_failure = failures.append

    def sink(output: RequestOutput) -> None:
        if output.finished:
            finished[output.request_id] = output
            if len(finished) == 2:
                all_finished.set()

    schedule = engine.scheduler.schedule
    calls = iter(range(1000))

    def failing_schedule():
        if next(calls) == 3:  # after a few real steps, with both requests running
            raise RuntimeError("scheduler invariant broken")
        return schedule()

    engine.scheduler.schedule = failing_schedule
    engine.submit(_request("a"), sink)
    engine.submit(_request("b"), sink)
    engine.start()
    try:
        assert all_finished.wait(timeout=60), "a stream was left hanging"
        for output in finished.values():
            assert output.error is not None and output.error.code == "INTERNAL"
            assert "scheduler invariant broken" in str(output.error)
        assert len(failures) == 1 and engine.failure is failures[0]
        with pytest.raises(UnavailableError, match="reload the model"):
            engine.submit(_request("c"), sink)
        with pytest.raises(UnavailableError, match="reload the model"):
            engine.call(lambda: None).result(timeout=10)
        assert engine.cancel("a").result(timeout=10) is False
    finally:
        engine.shutdown()  # returns at once: the loop has already stopped
