"""Output constraints over the real gRPC server with the real SmolLM2 on the CPU: JSON schema, regex, choice and EBNF
outputs satisfy their constraint; constrained requests beside unconstrained ones leave those unchanged; bad
constraints answer INVALID_ARGUMENT with the reason (the `stub` fixture checks the KV pool is free after each)."""

from __future__ import annotations

import ast
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import jsonschema
import pytest

from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from tests.e2e.helpers import chat_request, generate

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 1, "maxItems": 3},
        "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
                                                     "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["city", "zip"]},
    },
    "required": ["name", "age", "role", "tags", "address"],
}
# Not strict, unlisted properties are allowed unless the schema closes its objects.
CLOSED_PERSON = {**PERSON, "additionalProperties": False,
                 "properties": {**PERSON["properties"],
                                "address": {**PERSON["properties"]["address"], "additionalProperties": False}}}
DATE = r"\d{4}-\d{2}-\d{2}"
ARITHMETIC = 'root ::= term (" " op " " term){1,3}\nop ::= "+" | "-" | "*"\nterm ::= [1-9] [0-9]? | "(" term " + " term ")"'


def constrained(question: str, max_output_tokens: int = 96, **constraint) -> object:
    request = chat_request(question, max_output_tokens=max_output_tokens)
    request.sampling.output_constraint.CopyFrom(types_pb.OutputConstraint(**constraint))
    return request


def schema_request(schema: dict, strict: bool = True) -> object:
    return constrained("Describe a person as JSON.", strict=strict,
                       json_schema=types_pb.JsonSchemaConstraint(schema_json=json.dumps(schema)))


@pytest.mark.parametrize(("schema", "strict"), [(PERSON, True), (CLOSED_PERSON, False)])
def test_json_schema_output_validates(stub, schema, strict) -> None:
    completion = generate(stub, schema_request(schema, strict))
    assert len(completion.responses) > 2  # streamed token by token, the concatenation is the document
    jsonschema.validate(json.loads(completion.text), schema)
    assert completion.last.finish_reason == types_pb.FINISH_REASON_EOS_TOKEN


def test_regex_choice_and_grammar_outputs(stub) -> None:
    date = generate(stub, constrained("When did the Berlin wall fall?", regex=DATE))
    assert re.fullmatch(DATE, date.text), date.text
    choices = ["yes", "no", 'it "depends"']
    choice = generate(stub, constrained("Is the sky green?", choice=types_pb.ChoiceConstraint(choices=choices)))
    assert choice.text in choices
    expression = generate(stub, constrained("Write an arithmetic expression.", ebnf_grammar=ARITHMETIC))
    parsed = ast.parse(expression.text, mode="eval")
    assert isinstance(parsed.body, ast.BinOp), expression.text
    json_object = generate(stub, constrained("Describe a city as JSON.", max_output_tokens=200,
                                             json_object=types_pb.JsonObjectConstraint()))
    assert json_object.last.finish_reason == types_pb.FINISH_REASON_EOS_TOKEN
    assert isinstance(json.loads(json_object.text), dict)
    for last in (date.last, choice.last, expression.last):
        assert last.finish_reason == types_pb.FINISH_REASON_EOS_TOKEN


def test_grammar_end_overrides_min_output_tokens_and_ignore_eos(stub) -> None:
    """min_output_tokens bans EOS, yet a finished choice allows nothing else: the grammar's end wins. Under
    ignore_eos the grammar's end still ends the output."""
    choices = ["yes", "no"]
    request = constrained("Is water wet?", choice=types_pb.ChoiceConstraint(choices=choices))
    request.stopping.min_output_tokens = 8
    assert generate(stub, request).text in choices
    request.stopping.min_output_tokens = 0
    request.stopping.ignore_eos = True
    ignoring = generate(stub, request)
    assert ignoring.text in choices
    assert ignoring.last.finish_reason == types_pb.FINISH_REASON_EOS_TOKEN


def test_stop_string_ends_a_constrained_output(stub) -> None:
    full = generate(stub, schema_request(PERSON))
    request = schema_request(PERSON)
    request.stopping.stop_strings.append('"age"')
    stopped = generate(stub, request)
    assert stopped.last.finish_reason == types_pb.FINISH_REASON_STOP_STRING
    assert stopped.text == full.text[: full.text.index('"age"')]


def test_constrained_rows_leave_unconstrained_outputs_unchanged(stub) -> None:
    plain = [chat_request(question, max_output_tokens=16) for question in
             ("What is the capital of France?", "Name three primary colors.", "What is 2 + 3?",
              "Who wrote Romeo and Juliet?")]
    masked = [schema_request(PERSON), constrained("Pick a date.", regex=DATE),
              constrained("Is it raining?", choice=types_pb.ChoiceConstraint(choices=["yes", "no"])),
              constrained("An expression, please.", ebnf_grammar=ARITHMETIC)]
    solo = [generate(stub, request) for request in plain]
    mixed = [request for pair in zip(plain, masked) for request in pair]
    with ThreadPoolExecutor(max_workers=len(mixed)) as pool:
        together = list(pool.map(lambda request: generate(stub, request), mixed))
    for alone, batched in zip(solo, together[0::2]):
        assert batched.token_ids == alone.token_ids
    person, date, choice, expression = together[1::2]
    jsonschema.validate(json.loads(person.text), PERSON)
    assert re.fullmatch(DATE, date.text)
    assert choice.text in ("yes", "no")
    ast.parse(expression.text, mode="eval")


@pytest.mark.parametrize(
    ("constraint", "reason"),
    [
        ({"json_schema": types_pb.JsonSchemaConstraint(schema_json='{"type": "foo"}')}, 'Unsupported type "foo"'),
        ({"json_schema": types_pb.JsonSchemaConstraint(schema_json='{"type": "array", "uniqueItems": true}'),
          "strict": True}, "'uniqueItems'"),
        ({"json_schema": types_pb.JsonSchemaConstraint(schema_json="{not json")}, "not valid JSON"),
        ({"regex": "(ab"}, "regular expression does not parse"),
        ({"regex": "a(?=b)"}, "Lookahead"),
        ({"ebnf_grammar": 'root ::= "a" |'}, "grammar does not parse"),
        ({"ebnf_grammar": 'start ::= "a"'}, "root"),
        ({"choice": types_pb.ChoiceConstraint()}, "choice list is empty"),
    ],
)
def test_bad_constraint_is_invalid_argument(stub, constraint, reason) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        generate(stub, constrained("hello", **constraint))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason in raised.value.details()
    assert "sampling.output_constraint" in raised.value.details()


def test_cancel_while_the_grammar_compiles(stub, served_smollm2) -> None:
    """A request cancelled while its grammar compiles (about a second for this regex, off the engine thread) leaves
    the engine at once; the finished compile is cached and serves the next request."""
    engine = served_smollm2.served.engine
    metrics = served_smollm2.served.metrics.registry
    compiles = metrics.get_sample_value("arbi_grammar_compile_seconds_count")
    email = r"[a-z]{1,300}@[a-z]{1,200}\.(com|org|net)"
    call = stub.Generate(constrained("Write an e-mail address.", max_output_tokens=8, regex=email))
    call.initial_metadata()  # sent once the request was submitted
    call.cancel()
    deadline = time.monotonic() + 10
    while engine.num_requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.num_requests == 0
    assert metrics.get_sample_value("arbi_grammar_compile_seconds_count") == compiles  # left before its grammar
    while metrics.get_sample_value("arbi_grammar_compile_seconds_count") == compiles and time.monotonic() < deadline:
        time.sleep(0.01)  # the compile goes on without its request
    hits = metrics.get_sample_value("arbi_grammar_cache_hits_total", {"source": "memory"}) or 0
    address = generate(stub, constrained("Write an e-mail address.", max_output_tokens=8, regex=email))
    assert metrics.get_sample_value("arbi_grammar_cache_hits_total", {"source": "memory"}) == hits + 1
    assert re.fullmatch(r"[a-z]+(@[a-z]*)?(\.[a-z]*)?", address.text), address.text
