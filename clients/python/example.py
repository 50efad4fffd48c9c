"""Streams one greedy chat completion from an arbi-serve server with the typed client, then prints the
server's description from the admin API.

Usage: ARBI_ADMIN_TOKEN=... python example.py HOST:PORT
ARBI_GENERATE_TOKEN is sent with the generate call when the server requires one.
"""

from __future__ import annotations

import os
import sys

import grpc

from arbi_client import ArbiClient
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from arbi_client.requests import chat_request

QUESTION = "What is the capital of France?"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: ARBI_ADMIN_TOKEN=... python example.py HOST:PORT", file=sys.stderr)
        return 2
    admin_token = os.environ.get("ARBI_ADMIN_TOKEN", "")
    if not admin_token:
        print("error: ARBI_ADMIN_TOKEN is not set (the server mints it into the admin-token file of its "
              "cache directory)", file=sys.stderr)
        return 2
    client = ArbiClient(argv[0], token=os.environ.get("ARBI_GENERATE_TOKEN"), admin_token=admin_token)
    with client:
        try:
            request = chat_request([{"role": "user", "content": QUESTION}], max_output_tokens=32,
                                   temperature=0.0)
            for response in client.generate(request, timeout_s=120):
                print(response.text, end="", flush=True)
                if response.HasField("usage"):
                    print(f"\nfinish: {types_pb.FinishReason.Name(response.finish_reason)}, "
                          f"prompt tokens: {response.usage.prompt_token_count}, "
                          f"output tokens: {response.usage.output_token_count}")
            info = client.get_server_info()
        except grpc.RpcError as error:
            print(f"error: {error.code().name}: {error.details()}", file=sys.stderr)
            return 1
    print(f"server: arbi-serve {info.version}, model {info.model.name} ({info.model.architecture}, "
          f"{info.model.max_context_tokens} context tokens), backend {info.backend} on {info.device}, "
          f"kv codec {info.kv_codec}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
