"""GenerateService.Session over the real server: many generations on one stream, individual cancels, and
per-generation errors that leave the stream open."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import grpc
from google.rpc import code_pb2, error_details_pb2

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from tests.conftest import wait_for_idle_pool
from tests.e2e.helpers import chat_request, generate

QUESTIONS = [
    "What is the capital of France?",
    "Name three primary colors.",
    "Write a haiku about the sea.",
    "Who wrote Romeo and Juliet?",
]
OUTPUT_TOKENS = 20
CANCELLED_OUTPUT_TOKENS = 256  # far more steps than a cancel needs to arrive


class RequestFeed:
    """The client side of a Session: messages put here are sent in order until `close()`."""

    def __init__(self) -> None:
        self._messages: queue.SimpleQueue[pb.SessionRequest | None] = queue.SimpleQueue()

    def start(self, generation_id: str, request: pb.GenerateRequest) -> None:
        self._messages.put(pb.SessionRequest(start=pb.StartGeneration(generation_id=generation_id,
                                                                      request=request)))

    def cancel(self, generation_id: str) -> None:
        self._messages.put(pb.SessionRequest(cancel=pb.CancelGeneration(generation_id=generation_id)))

    def send(self, message: pb.SessionRequest) -> None:
        self._messages.put(message)

    def close(self) -> None:
        self._messages.put(None)

    def __iter__(self) -> Iterator[pb.SessionRequest]:
        while (message := self._messages.get()) is not None:
            yield message


def _request(index: int, max_output_tokens: int) -> pb.GenerateRequest:
    question = QUESTIONS[index % len(QUESTIONS)] + f" ({index})"
    request = chat_request(question, max_output_tokens=max_output_tokens)
    request.stopping.ignore_eos = True  # every generation runs to its length unless cancelled
    return request


def test_16_interleaved_generations_with_8_cancelled(stub, served_smollm2) -> None:
    cancelled = {f"gen-{i}" for i in range(1, 16, 2)}
    requests = {
        f"gen-{i}": _request(i, CANCELLED_OUTPUT_TOKENS if f"gen-{i}" in cancelled else OUTPUT_TOKENS)
        for i in range(16)
    }
    solo = {gid: generate(stub, request) for gid, request in requests.items() if gid not in cancelled}

    feed = RequestFeed()
    for gid, request in requests.items():
        feed.start(gid, request)
    tokens: dict[str, list[int]] = {gid: [] for gid in requests}
    texts: dict[str, str] = {gid: "" for gid in requests}
    finals: dict[str, pb.GenerateResponse] = {}
    interleaved = set()
    previous = None
    for response in stub.Session(iter(feed), timeout=300):
        gid = response.generation_id
        assert response.WhichOneof("event") == "output", response
        output = response.output
        if previous is not None and previous != gid and previous not in finals:
            interleaved.add(previous)
        previous = gid
        tokens[gid] += [t.token_id for t in output.tokens]
        texts[gid] += output.text
        if gid in cancelled and output.tokens and len(tokens[gid]) == len(output.tokens):
            feed.cancel(gid)  # after its first tokens, well before its last
        if output.finish_reason != types_pb.FINISH_REASON_UNSPECIFIED:
            finals[gid] = output
            if len(finals) == len(requests):
                feed.close()

    assert set(finals) == set(requests)
    assert interleaved, "the generations' messages were not interleaved"
    for gid in cancelled:
        assert finals[gid].finish_reason == types_pb.FINISH_REASON_CANCELLED
        assert 0 < len(tokens[gid]) < CANCELLED_OUTPUT_TOKENS
        assert finals[gid].usage.output_token_count == len(tokens[gid])
    for gid, alone in solo.items():
        assert tokens[gid] == alone.token_ids
        assert texts[gid] == alone.text
        assert finals[gid].finish_reason == types_pb.FINISH_REASON_MAX_OUTPUT_TOKENS
    wait_for_idle_pool(served_smollm2.served.engine)
    stats = served_smollm2.served.engine.stats()
    assert stats.num_free_blocks == stats.num_total_blocks


def _bad_request(response: pb.SessionResponse) -> list[str]:
    fields = []
    for detail in response.error.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            fields += [violation.field for violation in bad_request.field_violations]
    return fields


def test_refused_generations_leave_the_stream_open(stub) -> None:
    feed = RequestFeed()
    bad_temperature = chat_request("Hi")
    bad_temperature.sampling.temperature = -1.0
    feed.start("ok-1", chat_request("What is 2 + 3?", max_output_tokens=4))
    feed.start("ok-1", chat_request("Hi", max_output_tokens=4))  # still live: refused
    feed.start("", chat_request("Hi", max_output_tokens=4))
    feed.start("bad", bad_temperature)
    feed.cancel("never-started")  # ignored
    feed.start("ok-2", chat_request("What is 2 + 3?", max_output_tokens=4))
    feed.close()
    errors: dict[str, list[pb.SessionResponse]] = {}
    finished = {}
    for response in stub.Session(iter(feed), timeout=120):
        if response.HasField("error"):
            errors.setdefault(response.generation_id, []).append(response)
        elif response.output.finish_reason:
            finished[response.generation_id] = response.output
    assert set(finished) == {"ok-1", "ok-2"}
    assert finished["ok-1"].usage.output_token_count == 4
    assert set(errors) == {"ok-1", "", "bad"}
    for gid in errors:
        assert [e.error.code for e in errors[gid]] == [code_pb2.INVALID_ARGUMENT]
    assert _bad_request(errors["ok-1"][0]) == ["start.generation_id"]
    assert _bad_request(errors[""][0]) == ["start.generation_id"]
    assert "temperature" in _bad_request(errors["bad"][0])[0]


def test_a_message_without_action_ends_the_stream(stub) -> None:
    feed = RequestFeed()
    feed.send(pb.SessionRequest())
    try:
        list(stub.Session(iter(feed), timeout=30))
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "start or cancel" in error.details()
    else:
        raise AssertionError("an empty SessionRequest was accepted")
    finally:
        feed.close()


def test_cancelling_the_stream_stops_every_live_generation(stub) -> None:
    feed = RequestFeed()
    for gid in ("x", "y"):
        feed.start(gid, _request(0, CANCELLED_OUTPUT_TOKENS))
    responses = stub.Session(iter(feed), timeout=120)
    seen = {next(responses).generation_id}
    while len(seen) < 2:
        seen.add(next(responses).generation_id)
    responses.cancel()  # the `stub` fixture then checks that the KV pool is fully free again
    feed.close()
