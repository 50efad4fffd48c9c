"""Drives an engine's streams for tests that compare two engine loops: every output of every request, cancels
issued from a request's own sink, and the KV pool checked back to free at the end. CPU and GPU tests share it.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import torch

from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.request import GenerationRequest, RequestOutput
from arbi_grpc.engine.sampling_params import SamplingParams

Outputs = dict[str, list[RequestOutput]]


def run_requests(engine: Engine, requests: list[GenerationRequest],
                 cancel_after: dict[str, int] | None = None) -> Outputs:
    """Submits every request before the engine thread starts (a deterministic first schedule), waits for all
    and stops the engine; a request in `cancel_after` is cancelled from its sink once it has that many tokens."""
    outputs: Outputs = {request.request_id: [] for request in requests}
    done = threading.Semaphore(0)
    cancel_after = cancel_after or {}

    def sink_for(request_id: str):
        def sink(output: RequestOutput) -> None:
            outputs[request_id].append(output)
            num_tokens = sum(len(o.tokens) for o in outputs[request_id])
            if not output.finished and num_tokens == cancel_after.get(request_id):
                engine.cancel(request_id)
            if output.finished:
                done.release()
        return sink

    for request in requests:
        engine.submit(request, sink_for(request.request_id))
    engine.start()
    try:
        for _ in requests:
            assert done.acquire(timeout=120), "a request did not finish"
        check_pool_is_free(engine)
    finally:
        engine.shutdown()
    return outputs


def check_pool_is_free(engine: Engine) -> None:
    """Every block is free or a cached evictable one, and every batch slot free, once all requests ended (checked
    on the engine thread)."""
    def check() -> None:
        kv = engine.scheduler.block_manager
        kv.check_invariants()
        assert engine.scheduler.num_unfinished == 0
        assert kv.num_free_blocks == kv.num_total_blocks
        assert engine.scheduler.batch_slots.num_taken == 0
    engine.call(check).result(timeout=30)


def sampling_for(index: int) -> SamplingParams:
    """Greedy for even requests, seeded nucleus sampling for odd ones; logprobs on some."""
    if index % 2 == 0:
        return SamplingParams(temperature=0.0, logprobs_count=index % 3)
    return SamplingParams(temperature=0.9, top_p=0.95, top_k=40, seed=1000 + index, logprobs_count=index % 3)


def assert_same_streams(overlap: Outputs, sync: Outputs, logprob_tolerance: float = 1e-5) -> None:
    """Equal outputs: token ids, text, finish reasons and counts exactly; log-probabilities within rounding
    (a sequence that ends on a stop condition is computed once more in the overlapped loop, which changes the
    batch shape of that step and so the last bits of its neighbours' logits)."""
    assert overlap.keys() == sync.keys()
    for request_id, expected in sync.items():
        got = overlap[request_id]
        assert [_without_logprobs(o) for o in got] == [_without_logprobs(o) for o in expected], request_id
        torch.testing.assert_close(_logprobs(got), _logprobs(expected), rtol=0, atol=logprob_tolerance)


def _without_logprobs(output: RequestOutput) -> RequestOutput:
    tokens = tuple(replace(t, logprob=0.0, top_logprobs=tuple((i, 0.0) for i, _ in t.top_logprobs))
                   for t in output.tokens)
    return replace(output, tokens=tokens)


def _logprobs(outputs: list[RequestOutput]) -> torch.Tensor:
    values = [v for o in outputs for t in o.tokens for v in (t.logprob, *(lp for _, lp in t.top_logprobs))]
    values += [v for o in outputs if o.prompt_logprobs for v in o.prompt_logprobs[1:]]
    return torch.tensor(values, dtype=torch.float64)


def token_ids(outputs: list[RequestOutput]) -> list[int]:
    return [token.token_id for output in outputs for token in output.tokens]
