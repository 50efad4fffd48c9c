"""The serving benchmark's load: its plans (fresh prompts, arrivals, shares per client process), its statistics,
and one small real drive of the SmolLM2 server from two client processes over each path (gRPC, the gateway)."""

from __future__ import annotations

import math

import pytest

from arbi_gateway.process import GatewayProcess
from benchmarks.serving_load import PATHS, RequestTiming, drive, make_plan, percentile, summarize
from tests.conftest import wait_for_idle_pool


def test_plans_draw_fresh_prompts_of_the_given_length_unless_seeded():
    first, second = (make_plan(6, 12, 3, vocab_size=500) for _ in range(2))
    assert all(len(p) == 12 and all(0 <= t < 500 for t in p) for p in first.prompts)
    assert first.prompts != second.prompts  # fresh each run: nothing for the prefix cache to reuse
    assert make_plan(6, 12, 3, 500, seed=7).prompts == make_plan(6, 12, 3, 500, seed=7).prompts
    assert first.arrival_offsets_s == [0.0] * 6 and first.num_output_tokens == 18


def test_poisson_arrivals_follow_the_rate():
    offsets = make_plan(400, 2, 1, 100, rate_per_s=50.0, seed=3).arrival_offsets_s
    assert offsets[0] == 0.0 and offsets == sorted(offsets)
    assert offsets[-1] == pytest.approx(399 / 50.0, rel=0.2)  # 399 gaps of mean 1/50 s


def test_shares_split_requests_and_concurrency_across_processes():
    plan = make_plan(10, 4, 2, 100, concurrency=5, seed=1)
    shares = [plan.share(i, 3) for i in range(3)]
    assert sorted(p for s in shares for p in map(tuple, s.prompts)) == sorted(map(tuple, plan.prompts))
    assert [s.concurrency for s in shares] == [2, 2, 1]
    assert make_plan(4, 2, 1, 10, rate_per_s=1.0).share(1, 2).concurrency == 0  # open loop stays open


def test_bad_plans_are_refused():
    with pytest.raises(ValueError, match="concurrency"):
        make_plan(4, 8, 2, 100, concurrency=-1)
    with pytest.raises(ValueError, match="must be > 0"):
        make_plan(4, 0, 2, 100)


def test_statistics_from_timings():
    # Sent at 0 and 1; first tokens 0.5 s later; 5 tokens 0.1 s apart after the first; one request failed.
    timings = [RequestTiming(0.0, 0.5, 0.9, 5), RequestTiming(1.0, 1.5, 1.9, 5),
               RequestTiming(1.0, 0.0, 1.2, 0, "UNAVAILABLE: gone")]
    stats = summarize(timings, start_s=0.0)
    assert (stats.requests, stats.failed) == (3, 1)
    assert stats.seconds == pytest.approx(1.9)
    assert stats.output_tokens_per_s == pytest.approx(10 / 1.9)
    assert stats.ttft_p50_ms == pytest.approx(500.0) and stats.tpot_p99_ms == pytest.approx(100.0)
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.0 and percentile([3.0, 1.0, 2.0, 4.0], 0.99) == 4.0
    assert math.isnan(percentile([], 0.5))


@pytest.mark.parametrize("path", PATHS)
def test_drive_streams_every_request_from_client_processes(served_smollm2, path, tmp_path):
    plan = make_plan(4, 8, 3, vocab_size=1000, concurrency=2)
    if path == "grpc":
        timings, start = drive(served_smollm2.target, plan, num_processes=2)
    else:  # REST /v1/completions streamed through a gateway in front of the same server
        with GatewayProcess.spawn(["--upstream", served_smollm2.target, "--http-port", "0"],
                                  tmp_path / "gateway.log") as gateway:
            timings, start = drive(gateway.url, plan, num_processes=2, path=path)
    assert [t.error for t in timings] == [""] * 4
    assert [t.num_tokens for t in timings] == [3] * 4  # ignore_eos: every request gets its full output
    assert all(start <= t.sent_s <= t.first_token_s <= t.finished_s for t in timings)
    stats = summarize(timings, start)
    assert stats.failed == 0 and stats.output_tokens_per_s > 0
    wait_for_idle_pool(served_smollm2.served.engine)  # nothing left running, every KV block free
