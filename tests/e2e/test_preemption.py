"""Preemption by recompute with the real model: a KV pool far too small for the batch still gives every
request exactly the output it gets alone, and the pool ends fully free."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import wait_for_idle_pool
from tests.e2e.helpers import chat_request, generate, stub_for


@pytest.fixture(scope="module")
def small_pool_server(smollm2_dir):
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.served_model import build_served_model
    from arbi_grpc.server import GrpcServer

    # 12 blocks of 16 tokens: room for about two of the requests below at a time.
    config = EngineConfig(model=str(smollm2_dir), kv_cache_memory_mib=9, max_step_tokens=64)
    server = GrpcServer(build_served_model(config)).start()
    yield server
    server.stop()


def test_outputs_survive_preemption(small_pool_server) -> None:
    channel, stub = stub_for(small_pool_server.target)
    engine = small_pool_server.served.engine
    assert engine.stats().num_total_blocks == 12
    requests = [chat_request(f"Describe a color, please. Number {i}.", max_output_tokens=40)
                for i in range(6)]
    for request in requests:
        request.stopping.ignore_eos = True
    solo = [generate(stub, request) for request in requests]
    assert engine.stats().num_preemptions == 0
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        together = list(pool.map(lambda request: generate(stub, request), requests))
    assert engine.stats().num_preemptions > 0
    for alone, batched in zip(solo, together):
        assert batched.token_ids == alone.token_ids
    channel.close()
    wait_for_idle_pool(engine)


def test_constrained_outputs_survive_preemption(small_pool_server) -> None:
    """A preempted constrained sequence is recomputed with its matcher as it was: the same output as alone."""
    from arbi_client.arbi.v1 import generation_types_pb2 as types_pb

    channel, stub = stub_for(small_pool_server.target)
    engine = small_pool_server.served.engine
    pattern = r"[a-z]+( [a-z]+){30,50}\."
    requests = [chat_request(f"Describe a color, please. Number {i}.", max_output_tokens=40) for i in range(6)]
    for request in requests:
        request.stopping.ignore_eos = True
    for request in requests[::2]:
        request.sampling.output_constraint.regex = pattern
    solo = [generate(stub, request) for request in requests]
    preemptions = engine.stats().num_preemptions
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        together = list(pool.map(lambda request: generate(stub, request), requests))
    assert engine.stats().num_preemptions > preemptions
    for alone, batched in zip(solo, together):
        assert batched.token_ids == alone.token_ids
    for completion in together[::2]:
        if completion.last.finish_reason == types_pb.FINISH_REASON_EOS_TOKEN:
            assert re.fullmatch(pattern, completion.text), completion.text
        else:  # cut by max_output_tokens: a prefix of the pattern's language
            assert completion.last.finish_reason == types_pb.FINISH_REASON_MAX_OUTPUT_TOKENS
            assert re.fullmatch(r"[a-z]+( [a-z]*)*", completion.text), completion.text
    channel.close()
    wait_for_idle_pool(engine)
