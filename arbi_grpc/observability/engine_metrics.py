"""The EngineObserver that feeds the Prometheus metrics: per-request latencies and token counts (also by
tenant), per-step batch sizes and durations, and one debug log record per finished request carrying its
request id.

A request's tenant is its prefix-cache namespace: with an API keys file, the caller's key's tenant
(`auth/caller.py`), so usage by tenant comes from the credential; the label set is bounded (MAX_TENANT_LABELS).

It keeps a small timing record per live request; every call comes from the engine thread, so the records
need no lock.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from arbi_grpc.engine.request import RequestOutput
from arbi_grpc.observability.metrics import MAX_TENANT_LABELS, OTHER_TENANTS, ModelMetrics

log = logging.getLogger(__name__)


@dataclass
class _RequestTiming:
    arrival_s: float
    num_prompt_tokens: int
    tenant_label: str
    scheduled: bool = False
    first_token_s: float | None = None
    last_token_s: float | None = None
    num_output_tokens: int = 0


class EngineMetricsObserver:
    """Turns engine events into histogram observations and counter increments."""

    def __init__(self, metrics: ModelMetrics) -> None:
        self._metrics = metrics
        self._requests: dict[str, _RequestTiming] = {}
        self._tenant_labels: set[str] = set()

    def request_added(self, request_id: str, arrival_s: float, num_prompt_tokens: int, tenant: str) -> None:
        label = self._tenant_label(tenant)
        self._requests[request_id] = _RequestTiming(arrival_s, num_prompt_tokens, label)
        self._metrics.prompt_tokens.inc(num_prompt_tokens)
        self._metrics.tenant_tokens.labels(tenant=label, kind="prompt").inc(num_prompt_tokens)

    def request_scheduled(self, request_id: str) -> None:
        timing = self._requests.get(request_id)
        if timing is not None and not timing.scheduled:
            timing.scheduled = True  # queue time ends at the first admission; recomputes do not count
            self._metrics.queue_time.observe(time.monotonic() - timing.arrival_s)

    def token_emitted(self, request_id: str) -> None:
        timing = self._requests.get(request_id)
        if timing is None:
            return
        now = time.monotonic()
        if timing.last_token_s is None:
            timing.first_token_s = now
            self._metrics.time_to_first_token.observe(now - timing.arrival_s)
        else:
            self._metrics.inter_token_latency.observe(now - timing.last_token_s)
        timing.last_token_s = now
        timing.num_output_tokens += 1
        self._metrics.output_tokens.inc()
        self._metrics.tenant_tokens.labels(tenant=timing.tenant_label, kind="output").inc()

    def request_finished(self, request_id: str, output: RequestOutput) -> None:
        timing = self._requests.pop(request_id, None)
        if timing is None:
            return
        duration_s = time.monotonic() - timing.arrival_s
        reason = "error" if output.error is not None or output.finish_reason is None else output.finish_reason.value
        metrics = self._metrics
        metrics.request_latency.observe(duration_s)
        metrics.request_prompt_tokens.observe(timing.num_prompt_tokens)
        metrics.request_output_tokens.observe(timing.num_output_tokens)
        metrics.requests_finished.labels(reason=reason).inc()
        if log.isEnabledFor(logging.DEBUG):
            time_to_first_token_s = (
                None if timing.first_token_s is None else round(timing.first_token_s - timing.arrival_s, 6)
            )
            log.debug(
                "request %s finished: %s, %d prompt + %d output tokens in %.3f s", request_id, reason,
                timing.num_prompt_tokens, timing.num_output_tokens, duration_s,
                extra={
                    "request_id": request_id,
                    "finish_reason": reason,
                    "prompt_tokens": timing.num_prompt_tokens,
                    "output_tokens": timing.num_output_tokens,
                    "time_to_first_token_s": time_to_first_token_s,
                    "duration_s": round(duration_s, 6),
                },
            )

    def step_finished(self, num_sequences: int, num_tokens: int, duration_s: float) -> None:
        self._metrics.step_batch_size.observe(num_sequences)
        self._metrics.step_tokens.observe(num_tokens)
        self._metrics.step_duration.observe(duration_s)

    def _tenant_label(self, tenant: str) -> str:
        if tenant in self._tenant_labels or len(self._tenant_labels) < MAX_TENANT_LABELS:
            self._tenant_labels.add(tenant)
            return tenant
        return OTHER_TENANTS
