"""The gateway's OpenAPI document drives a fuzzer (schemathesis): every operation, fed generated requests,
answers without a 5xx and within a bounded time, and the engine's KV pool is free after each operation.

Kept small for CI (2 cores): a few examples per operation, and generated generations are bounded to a few
tokens, one or two choices and prompts, so each example costs at most a short prefill and four decode steps.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from arbi_gateway.process import GatewayProcess
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from tests.conftest import wait_for_idle_pool

_MAX_TOKENS = 4
_REQUEST_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def openapi_schema(gateway: GatewayProcess):
    return schemathesis.openapi.from_url(gateway.url + "/openapi.json")


schema = schemathesis.pytest.from_fixture("openapi_schema")


def _bounded_openai(body: dict[str, Any]) -> None:
    for name in ("max_tokens", "max_completion_tokens"):
        body.pop(name, None)
    body["max_tokens"] = _MAX_TOKENS
    if isinstance(body.get("n"), int) and body["n"] > 2:
        body["n"] = 2
    if isinstance(body.get("prompt"), list) and body["prompt"] and isinstance(body["prompt"][0], (str, list)):
        body["prompt"] = body["prompt"][:2]


def _bounded_generate(request: Any) -> None:
    if isinstance(request, dict):
        stopping = request.get("stopping") if isinstance(request.get("stopping"), dict) else {}
        stopping.pop("max_output_tokens", None)
        request["stopping"] = {**stopping, "maxOutputTokens": _MAX_TOKENS}


def _bound(case: schemathesis.Case) -> None:
    """Caps what a generated request may ask the engine to generate."""
    body = case.body
    if case.path in ("/v1/chat/completions", "/v1/completions") and isinstance(body, dict):
        _bounded_openai(body)
    elif case.operation.definition.raw.get("operationId") == "GenerateService.Generate":
        _bounded_generate(body)
    elif case.operation.definition.raw.get("operationId") == "GenerateService.Session" and isinstance(body, list):
        for message in body[:4]:
            start = message.get("start") if isinstance(message, dict) else None
            if isinstance(start, dict):
                _bounded_generate(start.get("request"))
        case.body = body[:4]
    elif case.operation.definition.raw.get("operationId") == "AudioService.Synthesize" and isinstance(body, dict):
        if isinstance(body.get("text"), str):
            body["text"] = body["text"][:64]  # a few words of speech, not 4,096 characters
    elif case.operation.definition.raw.get("operationId") == "AudioService.Converse" and isinstance(body, list):
        for message in body[:4]:
            if isinstance(message, dict) and isinstance(message.get("config"), dict):
                _bounded_generate(message["config"])
        case.body = body[:4]


@schema.parametrize()
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_server_error_and_no_hang(case: schemathesis.Case, gateway: GatewayProcess, served_smollm2) -> None:
    _bound(case)
    case.call_and_validate(base_url=gateway.url, checks=[not_a_server_error], timeout=_REQUEST_TIMEOUT_S)
    wait_for_idle_pool(served_smollm2.served.engine)
