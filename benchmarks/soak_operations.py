"""The soak harness's operations (benchmarks/soak.py): one call each over gRPC or REST, and the status codes
each may end with. Every operation returns the code it ended with: a gRPC status name, or `HTTP <status>`."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import grpc

from arbi_client.arbi.v1 import admin_service_pb2 as admin_pb
from arbi_client.arbi.v1 import admin_service_pb2_grpc as admin_grpc
from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as pb_grpc
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb

WORDS = ["river", "lamp", "orbit", "garden", "copper", "window", "signal", "harbor", "maple", "engine"]


@dataclass
class Targets:
    """Where the operations go: a shared gRPC channel, the gRPC address (for private channels), the gateway."""

    channel: grpc.aio.Channel
    grpc_target: str
    http: aiohttp.ClientSession  # its base_url is the gateway's
    admin_metadata: tuple[tuple[str, str], ...]
    model: str

    @property
    def generate(self) -> pb_grpc.GenerateServiceStub:
        return pb_grpc.GenerateServiceStub(self.channel)

    @property
    def admin(self) -> admin_grpc.AdminServiceStub:
        return admin_grpc.AdminServiceStub(self.channel)


def generate_request(rng: random.Random, max_output_tokens: int, ignore_eos: bool = False) -> pb.GenerateRequest:
    question = "Tell me about " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
    return pb.GenerateRequest(
        chat=types_pb.ChatInput(messages=[types_pb.ChatMessage(role="user", content=question)]),
        sampling=types_pb.SamplingParameters(temperature=rng.choice([0.0, 0.7]), seed=rng.randint(1, 1 << 30)),
        stopping=types_pb.StoppingCriteria(max_output_tokens=max_output_tokens, ignore_eos=ignore_eos),
    )


def _code(error: grpc.aio.AioRpcError) -> str:
    return error.code().name


async def grpc_generate(targets: Targets, rng: random.Random) -> str:
    try:
        async for _ in targets.generate.Generate(generate_request(rng, rng.randint(1, 12))):
            pass
    except grpc.aio.AioRpcError as error:
        return _code(error)
    return "OK"


async def grpc_cancel(targets: Targets, rng: random.Random) -> str:
    """Cancels a stream after its first answer."""
    call = targets.generate.Generate(generate_request(rng, 64, ignore_eos=True))
    try:
        async for _ in call:
            call.cancel()
    except asyncio.CancelledError:
        return "CANCELLED"
    except grpc.aio.AioRpcError as error:
        return _code(error)
    return "CANCELLED" if call.cancelled() else "OK"


async def grpc_deadline(targets: Targets, rng: random.Random) -> str:
    """A deadline far shorter than the generation."""
    try:
        async for _ in targets.generate.Generate(generate_request(rng, 128, ignore_eos=True),
                                                 timeout=rng.uniform(0.01, 0.3)):
            pass
    except grpc.aio.AioRpcError as error:
        return _code(error)
    return "OK"


async def grpc_disconnect(targets: Targets, rng: random.Random) -> str:
    """A client that closes its connection in the middle of a stream."""
    channel = grpc.aio.insecure_channel(targets.grpc_target)
    call = pb_grpc.GenerateServiceStub(channel).Generate(generate_request(rng, 64, ignore_eos=True))
    try:
        await call.read()
    except grpc.aio.AioRpcError as error:
        await channel.close()
        return _code(error)
    await channel.close(grace=None)
    return "DISCONNECTED"


async def grpc_session(targets: Targets, rng: random.Random) -> str:
    """Two generations on one Session stream; the second is cancelled after its first answer."""
    messages: asyncio.Queue = asyncio.Queue()
    for gid in ("a", "b"):
        request = generate_request(rng, 8 if gid == "a" else 64, ignore_eos=gid == "b")
        messages.put_nowait(pb.SessionRequest(start=pb.StartGeneration(generation_id=gid, request=request)))

    async def feed():
        while (message := await messages.get()) is not None:
            yield message

    finished: dict[str, int] = {}
    try:
        async for response in targets.generate.Session(feed()):
            if response.WhichOneof("event") == "error":
                return f"SESSION {response.error.code}"
            output = response.output
            if response.generation_id == "b" and "b-cancel" not in finished:
                finished["b-cancel"] = 0
                messages.put_nowait(pb.SessionRequest(cancel=pb.CancelGeneration(generation_id="b")))
            if output.finish_reason != types_pb.FINISH_REASON_UNSPECIFIED:
                finished[response.generation_id] = output.finish_reason
                if {"a", "b"} <= finished.keys():
                    messages.put_nowait(None)
    except grpc.aio.AioRpcError as error:
        return _code(error)
    return "OK" if finished.get("b") == types_pb.FINISH_REASON_CANCELLED else f"SESSION finish {finished}"


async def grpc_bad_input(targets: Targets, rng: random.Random) -> str:
    """One of several malformed requests; each must be refused, never served or hung."""
    request = generate_request(rng, 4)
    choice = rng.randrange(3)
    if choice == 0:
        request.ClearField("chat")
    elif choice == 1:
        request.sampling.temperature = -1.0
    else:
        request.sampling.top_p = 2.0
    return await grpc_generate_request(targets, request)


async def grpc_generate_request(targets: Targets, request: pb.GenerateRequest) -> str:
    try:
        async for _ in targets.generate.Generate(request):
            pass
    except grpc.aio.AioRpcError as error:
        return _code(error)
    return "OK"


async def grpc_admin(targets: Targets, rng: random.Random) -> str:
    """An admin read with the token, or without it (refused)."""
    metadata = targets.admin_metadata if rng.random() < 0.75 else ()
    try:
        if rng.random() < 0.5:
            await targets.admin.ListRunningRequests(admin_pb.ListRunningRequestsRequest(), metadata=metadata)
        else:
            await targets.admin.GetMemoryReport(admin_pb.GetMemoryReportRequest(), metadata=metadata)
    except grpc.aio.AioRpcError as error:
        return _code(error)
    return "OK"


def _chat_body(targets: Targets, rng: random.Random, stream: bool) -> dict:
    return {"model": targets.model, "stream": stream, "max_tokens": rng.randint(1, 12),
            "messages": [{"role": "user", "content": "Say " + rng.choice(WORDS)}]}


async def rest_chat(targets: Targets, rng: random.Random) -> str:
    stream = rng.random() < 0.5
    async with targets.http.post("/v1/chat/completions", json=_chat_body(targets, rng, stream)) as reply:
        await reply.read()
        return f"HTTP {reply.status}"


async def rest_disconnect(targets: Targets, rng: random.Random) -> str:
    """A streamed chat completion whose client goes away after the first chunk."""
    body = _chat_body(targets, rng, True) | {"max_tokens": 64}
    async with targets.http.post("/v1/chat/completions", json=body) as reply:
        await reply.content.readany()
        reply.close()  # drops the connection with the stream unread
        return f"HTTP {reply.status}"


async def rest_bad_input(targets: Targets, rng: random.Random) -> str:
    bodies = [b"{not json", b'{"messages": "x"}',
              b'{"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]}']
    async with targets.http.post("/v1/chat/completions", data=rng.choice(bodies),
                                 headers={"content-type": "application/json"}) as reply:
        await reply.read()
        return f"HTTP {reply.status}"


Operation = Callable[[Targets, random.Random], Awaitable[str]]

# name -> (operation, weight in the mix, the codes it may end with)
OPERATIONS: dict[str, tuple[Operation, int, frozenset[str]]] = {
    "grpc_generate": (grpc_generate, 6, frozenset({"OK"})),
    "grpc_session": (grpc_session, 2, frozenset({"OK"})),
    "grpc_cancel": (grpc_cancel, 2, frozenset({"CANCELLED"})),
    "grpc_deadline": (grpc_deadline, 2, frozenset({"DEADLINE_EXCEEDED", "OK"})),
    "grpc_disconnect": (grpc_disconnect, 1, frozenset({"DISCONNECTED"})),
    "grpc_bad_input": (grpc_bad_input, 2, frozenset({"INVALID_ARGUMENT"})),
    "grpc_admin": (grpc_admin, 1, frozenset({"OK", "UNAUTHENTICATED"})),
    "rest_chat": (rest_chat, 3, frozenset({"HTTP 200"})),
    "rest_disconnect": (rest_disconnect, 1, frozenset({"HTTP 200"})),
    "rest_bad_input": (rest_bad_input, 1, frozenset({"HTTP 400", "HTTP 404", "HTTP 422"})),
}
