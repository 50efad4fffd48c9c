"""End-to-end fixtures: a client stub on the session server, and a KV-leak check after every test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import wait_for_idle_pool
from tests.e2e.helpers import stub_for


@pytest.fixture
def stub(served_smollm2) -> Iterator:
    channel, stub = stub_for(served_smollm2.target)
    yield stub
    channel.close()
    wait_for_idle_pool(served_smollm2.served.engine)
