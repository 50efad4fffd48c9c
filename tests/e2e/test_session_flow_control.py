"""Flow control of generation streams: the engine's outputs wait in a bounded buffer (one merged pending
output per generation) while a client does not read, and nothing is lost or reordered."""

from __future__ import annotations

import asyncio
import time

from google.rpc import code_pb2 as grpc_code

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_grpc.engine.request import FinishReason, RequestOutput, TokenOutput
from arbi_grpc.servicers.output_buffer import OutputBuffer
from tests.e2e.helpers import chat_request, generate


def test_buffer_holds_one_merged_output_while_nobody_reads() -> None:
    async def scenario() -> tuple[int, RequestOutput | None, RequestOutput | None]:
        loop = asyncio.get_running_loop()
        ready_calls = 0

        def on_ready() -> None:
            nonlocal ready_calls
            ready_calls += 1

        buffer = OutputBuffer(loop, on_ready)
        for step in range(100):
            last = step == 99
            buffer.sink(RequestOutput(
                "r", tokens=(TokenOutput(step, -0.5),), text=f"<{step}>",
                prompt_logprobs=(None, -1.0) if step == 0 else None,
                finish_reason=FinishReason.MAX_OUTPUT_TOKENS if last else None,
                output_token_count=step + 1,
            ))
        await asyncio.sleep(0)  # let the loop run the hand-offs
        return ready_calls, buffer.take(), buffer.take()

    ready_calls, merged, after = asyncio.run(scenario())
    assert ready_calls == 1
    assert after is None
    assert [token.token_id for token in merged.tokens] == list(range(100))
    assert merged.text == "".join(f"<{step}>" for step in range(100))
    assert merged.prompt_logprobs == (None, -1.0)
    assert merged.finish_reason is FinishReason.MAX_OUTPUT_TOKENS
    assert merged.output_token_count == 100


def test_session_client_that_stops_reading_gets_everything(stub, served_smollm2) -> None:
    requests = {f"slow-{i}": chat_request(f"Count to {i + 5}, please.", max_output_tokens=16)
                for i in range(4)}
    solo = {gid: generate(stub, request) for gid, request in requests.items()}

    def feed():
        for gid, request in requests.items():
            yield pb.SessionRequest(start=pb.StartGeneration(generation_id=gid, request=request))
        while served_smollm2.served.engine.num_requests:  # keep the stream open until the engine is done
            time.sleep(0.05)

    responses = stub.Session(feed(), timeout=120)
    first = next(responses)  # then read nothing until every generation has finished in the engine
    engine = served_smollm2.served.engine
    deadline = time.monotonic() + 60
    while engine.num_requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine.num_requests == 0
    tokens = {gid: [] for gid in requests}
    finished = set()
    for response in [first, *responses]:
        assert response.WhichOneof("event") == "output"
        tokens[response.generation_id] += [t.token_id for t in response.output.tokens]
        if response.output.finish_reason:
            finished.add(response.generation_id)
    assert finished == set(requests)
    assert tokens == {gid: completion.token_ids for gid, completion in solo.items()}


class _Context:
    """The one ServicerContext method a SessionStream uses, for driving it without a transport."""

    async def abort(self, code, details, trailing_metadata=()):
        raise AssertionError(f"the stream was aborted: {code} {details}")


def test_a_session_holds_at_most_max_generations(served_smollm2) -> None:
    """Drives a SessionStream with the real engine: the third live generation is refused, a later one
    is accepted once the first two ended."""
    from arbi_grpc.servicers.generate import GenerateServicer
    from arbi_grpc.servicers.session import SessionStream

    def start(gid: str) -> pb.SessionRequest:
        return pb.SessionRequest(start=pb.StartGeneration(
            generation_id=gid, request=chat_request("Name a color.", max_output_tokens=6)))

    async def scenario() -> list[pb.SessionResponse]:
        two_ended = asyncio.Event()

        async def requests():
            for gid in ("a", "b", "c"):
                yield start(gid)
            await two_ended.wait()
            yield start("d")

        stream = SessionStream(GenerateServicer(served_smollm2.host, 2).start, max_generations=2)
        responses, ended = [], set()
        async for response in stream.run(requests(), _Context()):
            responses.append(response)
            if response.HasField("error") or response.output.finish_reason:
                ended.add(response.generation_id)
            if {"a", "b"} <= ended:
                two_ended.set()
        return responses

    responses = asyncio.run(scenario())
    errors = {r.generation_id: r.error for r in responses if r.HasField("error")}
    finished = {r.generation_id for r in responses if r.HasField("output") and r.output.finish_reason}
    assert set(errors) == {"c"}
    assert errors["c"].code == grpc_code.RESOURCE_EXHAUSTED and "2 live generations" in errors["c"].message
    assert finished == {"a", "b", "d"}
