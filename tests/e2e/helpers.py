"""Request builders and stream readers shared by the end-to-end tests."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as pb_grpc
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb


def chat_request(question: str, max_output_tokens: int = 24, **sampling) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        chat=types_pb.ChatInput(messages=[types_pb.ChatMessage(role="user", content=question)]),
        sampling=types_pb.SamplingParameters(temperature=0.0, **sampling),
        stopping=types_pb.StoppingCriteria(max_output_tokens=max_output_tokens),
    )


@dataclass(frozen=True)
class Completion:
    text: str
    token_ids: list[int]
    responses: list[pb.GenerateResponse]

    @property
    def last(self) -> pb.GenerateResponse:
        return self.responses[-1]


def generate(stub: pb_grpc.GenerateServiceStub, request: pb.GenerateRequest, **call) -> Completion:
    responses = list(stub.Generate(request, **call))
    return Completion(
        text="".join(r.text for r in responses),
        token_ids=[t.token_id for r in responses for t in r.tokens],
        responses=responses,
    )


def stub_for(target: str) -> tuple[grpc.Channel, pb_grpc.GenerateServiceStub]:
    channel = grpc.insecure_channel(target)
    return channel, pb_grpc.GenerateServiceStub(channel)


def error_reason(error: grpc.RpcError) -> str:
    """The ErrorInfo reason in the rich status of a failed call ("" when it carries none)."""
    for detail in rpc_status.from_call(error).details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info.reason
    return ""
