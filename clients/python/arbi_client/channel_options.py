"""The options of the channels `ArbiClient` and `AsyncArbiClient` open: a gRPC retry policy for the
GenerateService calls a server refused without processing them.

A call is retried only while gRPC has not committed it (no response header or message arrived), so a
retried generation never ran: a stream refused by HTTP/2 (UNAVAILABLE, "RST_STREAM with error code 7")
when a connection holds more streams than the server's `max_concurrent_streams`, a server with no resident
model or in a drain (UNAVAILABLE), and a full waiting queue (RESOURCE_EXHAUSTED). After the last attempt
the caller sees the server's status as it was.
"""

from __future__ import annotations

import json

GENERATE_SERVICE = "arbi.v1.GenerateService"
RETRY_MAX_ATTEMPTS = 5

_SERVICE_CONFIG = {
    "methodConfig": [{
        "name": [{"service": GENERATE_SERVICE}],
        "retryPolicy": {
            "maxAttempts": RETRY_MAX_ATTEMPTS,
            "initialBackoff": "0.1s",
            "maxBackoff": "2s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"],
        },
    }],
}

CHANNEL_OPTIONS: tuple[tuple[str, str | int], ...] = (
    ("grpc.enable_retries", 1),
    ("grpc.service_config", json.dumps(_SERVICE_CONFIG)),
)
