"""The CLI's side of a chat: reply options and the streamed reply over the typed client (`arbi_client`),
plus the readiness wait `run` uses while it boots a server. Imports no torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from arbi_client import ArbiClient
from arbi_client.readiness import grpc_target, is_serving, wait_until_serving
from arbi_client.tls import PLAINTEXT, ChannelTls

__all__ = ["ChatOptions", "grpc_target", "is_serving", "stream_chat", "wait_until_serving"]


@dataclass(frozen=True)
class ChatOptions:
    max_output_tokens: int = 512
    temperature: float = 0.0
    model: str = ""
    token: str = ""  # the server's generate token, when it requires one
    tls: ChannelTls = PLAINTEXT  # the CA (and client certificate) of a server that serves TLS


def stream_chat(target: str, messages: list[dict[str, str]], options: ChatOptions) -> Iterator[str]:
    """Yields the assistant's reply text as it is generated."""
    with ArbiClient(target, token=options.token or None, tls=options.tls) as client:
        yield from client.stream_chat(messages, model=options.model,
                                      max_output_tokens=options.max_output_tokens,
                                      temperature=options.temperature)
