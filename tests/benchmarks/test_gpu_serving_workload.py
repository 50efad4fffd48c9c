"""The serving benchmark's workload (lengths, Poisson arrivals) and the offline driver's timed submissions."""

from __future__ import annotations

import math
import time

import pytest

from arbi_grpc.engine.offline import generate
from arbi_grpc.engine.request import FinishReason, RequestOutput, TokenOutput
from benchmarks.gpu_serving import make_workload, percentile


def test_workload_lengths_stay_in_range_and_arrivals_follow_the_rate():
    workload = make_workload(400, 50.0, (32, 2048), (16, 512), vocab_size=1000, seed=3, tag="w")
    prompt_lens = [len(r.prompt_token_ids) for r in workload.requests]
    output_lens = [r.stopping.max_output_tokens for r in workload.requests]
    assert 32 <= min(prompt_lens) and max(prompt_lens) <= 2048
    assert 16 <= min(output_lens) and max(output_lens) <= 512
    assert percentile(prompt_lens, 0.5) < 400  # log-uniform: the median sits near sqrt(32 * 2048) = 256
    offsets = workload.arrival_offsets_s
    assert offsets[0] == 0.0 and offsets == sorted(offsets)
    assert offsets[-1] == pytest.approx(399 / 50.0, rel=0.2)  # 399 gaps of mean 1/50 s
    assert len({r.request_id for r in workload.requests}) == 400
    assert make_workload(5, math.inf, (8, 16), (2, 4), 100, 1, "b").arrival_offsets_s == [0.0] * 5


class _ImmediateEngine:
    """Finishes each request with one token as soon as it is submitted, remembering when that was."""

    def __init__(self) -> None:
        self.submitted_at: list[float] = []

    def submit(self, request, sink) -> None:
        self.submitted_at.append(time.monotonic())
        sink(RequestOutput(request.request_id, tokens=(TokenOutput(1, -0.5),),
                           finish_reason=FinishReason.MAX_OUTPUT_TOKENS))


def test_generate_submits_each_request_at_its_arrival_offset():
    engine = _ImmediateEngine()
    workload = make_workload(3, math.inf, (4, 8), (2, 3), 100, 2, "t")
    started = time.monotonic()
    done = generate(engine, workload.requests, arrival_offsets_s=[0.0, 0.15, 0.3])
    offsets = [at - started for at in engine.submitted_at]
    assert offsets[1] >= 0.15 and offsets[2] >= 0.3 and offsets[0] < 0.1
    assert [r.token_ids for r in done] == [[1]] * 3
    with pytest.raises(ValueError, match="2 arrival offsets for 3 requests"):
        generate(engine, workload.requests, arrival_offsets_s=[0.0, 1.0])
