"""The engine observer turns engine events into the right histogram counts, sums and counters."""

from __future__ import annotations

import time

import pytest

from arbi_grpc.engine.request import FinishReason, RequestOutput
from arbi_grpc.errors import UnavailableError
from arbi_grpc.observability import engine_metrics
from arbi_grpc.observability.engine_metrics import EngineMetricsObserver
from arbi_grpc.observability.metrics import ModelMetrics


def _value(metrics: ModelMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_a_request_lifecycle_is_counted_once_per_event() -> None:
    metrics = ModelMetrics()
    observer = EngineMetricsObserver(metrics)
    arrival = time.monotonic()
    observer.request_added("a", arrival, num_prompt_tokens=7, tenant="acme")
    observer.request_added("b", arrival, num_prompt_tokens=3, tenant="")
    for step in range(3):
        observer.request_scheduled("a")
        observer.token_emitted("a")
        if step == 0:
            observer.request_scheduled("b")
            observer.token_emitted("b")
        observer.step_finished(num_sequences=2 if step == 0 else 1, num_tokens=10 if step == 0 else 1,
                               duration_s=0.5)
    observer.request_finished("a", RequestOutput("a", finish_reason=FinishReason.MAX_OUTPUT_TOKENS))
    observer.request_finished("b", RequestOutput("b", error=UnavailableError("going away")))
    observer.request_finished("b", RequestOutput("b", finish_reason=FinishReason.CANCELLED))  # unknown now

    assert _value(metrics, "arbi_prompt_tokens_total") == 10
    assert _value(metrics, "arbi_output_tokens_total") == 4
    assert _value(metrics, "arbi_tenant_tokens_total", tenant="acme", kind="prompt") == 7
    assert _value(metrics, "arbi_tenant_tokens_total", tenant="acme", kind="output") == 3
    assert _value(metrics, "arbi_tenant_tokens_total", tenant="", kind="prompt") == 3
    assert _value(metrics, "arbi_tenant_tokens_total", tenant="", kind="output") == 1
    assert _value(metrics, "arbi_request_queue_time_seconds_count") == 2  # first scheduling only
    assert _value(metrics, "arbi_time_to_first_token_seconds_count") == 2
    assert _value(metrics, "arbi_inter_token_latency_seconds_count") == 2  # a's 2nd and 3rd tokens
    assert _value(metrics, "arbi_request_latency_seconds_count") == 2
    assert _value(metrics, "arbi_request_output_tokens_sum") == 4
    assert _value(metrics, "arbi_request_prompt_tokens_sum") == 10
    assert _value(metrics, "arbi_requests_finished_total", reason="max_output_tokens") == 1
    assert _value(metrics, "arbi_requests_finished_total", reason="error") == 1
    assert _value(metrics, "arbi_requests_finished_total", reason="cancelled") == 0
    assert _value(metrics, "arbi_step_batch_size_sum") == 4
    assert _value(metrics, "arbi_step_tokens_sum") == 12
    assert _value(metrics, "arbi_step_duration_seconds_sum") == pytest.approx(1.5)


def test_latencies_are_measured_from_the_arrival_time() -> None:
    metrics = ModelMetrics()
    observer = EngineMetricsObserver(metrics)
    observer.request_added("late", time.monotonic() - 2.0, num_prompt_tokens=1, tenant="")
    observer.request_scheduled("late")
    observer.token_emitted("late")
    observer.request_finished("late", RequestOutput("late", finish_reason=FinishReason.EOS_TOKEN))
    assert _value(metrics, "arbi_request_queue_time_seconds_sum") >= 2.0
    assert _value(metrics, "arbi_time_to_first_token_seconds_sum") >= 2.0
    assert _value(metrics, "arbi_request_queue_time_seconds_bucket", le="1.0") == 0
    assert _value(metrics, "arbi_request_queue_time_seconds_bucket", le="2.5") == 1


def test_tenants_past_the_label_limit_share_one_label(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_metrics, "MAX_TENANT_LABELS", 2)
    metrics = ModelMetrics()
    observer = EngineMetricsObserver(metrics)
    for index, tenant in enumerate(["a", "b", "c", "a", "d"]):
        observer.request_added(str(index), time.monotonic(), num_prompt_tokens=1, tenant=tenant)
    assert _value(metrics, "arbi_tenant_tokens_total", tenant="a", kind="prompt") == 2
    assert _value(metrics, "arbi_tenant_tokens_total", tenant="b", kind="prompt") == 1
    assert _value(metrics, "arbi_tenant_tokens_total", tenant=engine_metrics.OTHER_TENANTS, kind="prompt") == 2
