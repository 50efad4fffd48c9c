"""ServerConfig's stream limit: 0 derives it from the engine's admission capacity, an explicit value stays."""

from __future__ import annotations

import pytest

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.server_config import STREAM_HEADROOM, ServerConfig


def test_derived_stream_limit_exceeds_the_admission_capacity() -> None:
    resolved = ServerConfig().with_stream_limit_for(max_running_requests=64, max_waiting_requests=256)
    assert resolved.max_concurrent_streams == 64 + 256 + STREAM_HEADROOM
    assert resolved.with_stream_limit_for(1, 1) == resolved  # resolved once: later engines leave it


def test_explicit_stream_limit_is_kept() -> None:
    assert ServerConfig(max_concurrent_streams=8).with_stream_limit_for(64, 256).max_concurrent_streams == 8


def test_negative_stream_limit_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="max_concurrent_streams"):
        ServerConfig(max_concurrent_streams=-1)
