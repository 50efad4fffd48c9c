"""Builders of the request messages the sync and async clients share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb

Messages = Sequence[Mapping[str, str]]


def chat_input(messages: Messages) -> types_pb.ChatInput:
    """`[{"role": ..., "content": ...}, ...]` as a ChatInput."""
    return types_pb.ChatInput(
        messages=[types_pb.ChatMessage(role=m["role"], content=m["content"]) for m in messages]
    )


def chat_request(messages: Messages, *, model: str = "", max_output_tokens: int | None = None,
                 temperature: float | None = None, seed: int | None = None) -> pb.GenerateRequest:
    """A GenerateRequest continuing `messages` as the assistant (unset options use server defaults)."""
    request = pb.GenerateRequest(model=model, chat=chat_input(messages))
    if max_output_tokens is not None:
        request.stopping.max_output_tokens = max_output_tokens
    if temperature is not None:
        request.sampling.temperature = temperature
    if seed is not None:
        request.sampling.seed = seed
    return request


def bearer(token: str | None) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying `token`, or none."""
    return (("authorization", f"Bearer {token}"),) if token else ()
