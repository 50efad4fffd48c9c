"""Token ids -> token strings for OpenAI logprobs, through the server's Detokenize RPC, cached per model.

The public protos carry token ids and log-probabilities but no token text, so each distinct id is
detokenized once (special tokens kept) and remembered. A token that is part of a multi-byte UTF-8
character decodes to U+FFFD on its own; its `bytes` are then those of that text, not the raw token bytes,
which the protos do not expose.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from arbi_client.arbi.v1 import generate_service_pb2 as pb

from arbi_gateway.upstream import RpcKind, Upstream

_DETOKENIZE = "/arbi.v1.GenerateService/Detokenize"
_MAX_CACHED_TOKENS = 1 << 18
_MAX_CONCURRENT_CALLS = 64


class TokenTexts:
    """The text of single tokens, per served model."""

    def __init__(self, upstream: Upstream) -> None:
        self._upstream = upstream
        self._texts: dict[tuple[str, int], str] = {}

    async def resolve(self, model: str, token_ids: Iterable[int],
                      metadata: tuple[tuple[str, str], ...]) -> dict[int, str]:
        """The text of each id; raises grpc.RpcError when the server refuses one."""
        resolved: dict[int, str] = {}
        missing: list[int] = []
        for token_id in set(token_ids):
            text = self._texts.get((model, token_id))
            if text is None:
                missing.append(token_id)
            else:
                resolved[token_id] = text
        for start in range(0, len(missing), _MAX_CONCURRENT_CALLS):
            batch = missing[start:start + _MAX_CONCURRENT_CALLS]
            texts = await asyncio.gather(*(self.detokenize(model, [token_id], metadata) for token_id in batch))
            resolved.update(zip(batch, texts))
            if len(self._texts) + len(batch) > _MAX_CACHED_TOKENS:
                self._texts.clear()
            self._texts.update(((model, token_id), text) for token_id, text in zip(batch, texts))
        return resolved

    async def detokenize(self, model: str, token_ids: list[int], metadata: tuple[tuple[str, str], ...]) -> str:
        """The text of a token sequence (special tokens kept); raises grpc.RpcError."""
        call = self._upstream.method(_DETOKENIZE, RpcKind.UNARY_UNARY, pb.DetokenizeRequest.SerializeToString,
                                     pb.DetokenizeResponse.FromString)
        response = await call(pb.DetokenizeRequest(model=model, token_ids=token_ids), metadata=metadata)
        return response.text
