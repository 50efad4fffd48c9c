"""Tokenize, Detokenize and CountTokens: the resident model's tokenizer and chat template over gRPC.

Inputs are encoded exactly as Generate encodes them (raw text without special tokens, chat messages
through the chat template with the assistant turn opened), but without the context limit, so a client
can measure an input that would not fit.
"""

from __future__ import annotations

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_grpc.engine.input_processor import InputProcessor
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.served_model import ServedModel


def _encode(inputs: InputProcessor, request: pb.TokenizeRequest | pb.CountTokensRequest) -> list[int]:
    which = request.WhichOneof("input")
    if which == "prompt":
        return inputs.tokenizer.encode(request.prompt, add_special_tokens=False)
    if which == "chat":
        return inputs.chat_template.encode(
            [{"role": m.role, "content": m.content} for m in request.chat.messages]
        )
    raise InvalidArgumentError("input", "set one of prompt or chat")


def tokenize(served: ServedModel, request: pb.TokenizeRequest) -> pb.TokenizeResponse:
    return pb.TokenizeResponse(token_ids=_encode(served.inputs, request))


def detokenize(served: ServedModel, request: pb.DetokenizeRequest) -> pb.DetokenizeResponse:
    vocab_size = served.inputs.vocab_size
    for index, token_id in enumerate(request.token_ids):
        if not 0 <= token_id < vocab_size:
            raise InvalidArgumentError(
                f"token_ids[{index}]", f"token id {token_id} is outside the vocabulary [0, {vocab_size})"
            )
    text = served.inputs.tokenizer.decode(
        list(request.token_ids), skip_special_tokens=request.skip_special_tokens
    )
    return pb.DetokenizeResponse(text=text)


def count_tokens(served: ServedModel, request: pb.CountTokensRequest) -> pb.CountTokensResponse:
    return pb.CountTokensResponse(
        token_count=len(_encode(served.inputs, request)), max_context_tokens=served.max_model_len
    )
