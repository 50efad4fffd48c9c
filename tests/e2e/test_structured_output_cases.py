"""The structured-output case set over GenerateService (the real gRPC server, SmolLM2 on the CPU, greedy):
every case of `tests/structured_cases.py` sent at once (43 JSON schemas, regexes for dates, e-mail addresses
and phone numbers, a choice list, an EBNF arithmetic grammar) ends by itself with an output its check
accepts; 16 unconstrained requests batched with 16 constrained ones equal their solo runs; an output
constraint next to a constrained tool choice is INVALID_ARGUMENT, nothing leaked. Single constraints, bad
constraints and their reasons are in `test_structured_output.py`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb

from tests.e2e.helpers import chat_request, generate
from tests.structured_cases import MAX_OUTPUT_TOKENS, Case, schema_cases, text_cases

NATURAL_ENDS = (types_pb.FINISH_REASON_EOS_TOKEN, types_pb.FINISH_REASON_STOP_TOKEN)


def _request(case: Case, max_output_tokens: int = MAX_OUTPUT_TOKENS):
    request = chat_request(case.question, max_output_tokens=max_output_tokens)
    request.sampling.output_constraint.CopyFrom(case.constraint)
    return request


def test_every_constrained_output_ends_and_passes_its_check(stub) -> None:
    cases = schema_cases() + text_cases()
    assert len(schema_cases()) >= 40
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        completions = list(pool.map(lambda case: generate(stub, _request(case)), cases))
    for case, completion in zip(cases, completions):
        assert completion.last.finish_reason in NATURAL_ENDS, (case.name, completion.text)
        case.check(completion.text)


def test_unconstrained_outputs_batched_with_constrained_ones_equal_their_solo_runs(stub) -> None:
    constrained = [_request(case, max_output_tokens=24) for case in (schema_cases() + text_cases())[:16]]
    plain = [chat_request(f"Tell me one fact about the number {i}.", max_output_tokens=16) for i in range(16)]
    solo = [generate(stub, request) for request in plain]
    mixed = [request for pair in zip(constrained, plain) for request in pair]
    with ThreadPoolExecutor(max_workers=len(mixed)) as pool:
        together = list(pool.map(lambda request: generate(stub, request), mixed))
    for alone, batched in zip(solo, together[1::2]):
        assert (batched.token_ids, batched.text) == (alone.token_ids, alone.text)


def test_a_constrained_tool_choice_and_an_output_constraint_are_invalid_argument(stub) -> None:
    request = chat_request("What is the weather in Paris?")
    request.chat.tools.add(name="get_weather", parameters_json_schema='{"type": "object"}')
    request.chat.tool_choice.mode = types_pb.TOOL_CHOICE_MODE_REQUIRED
    request.sampling.output_constraint.regex = "[a-z]+"
    with pytest.raises(grpc.RpcError) as raised:
        generate(stub, request)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "output_constraint" in raised.value.details()
