"""The prefix cache with the real model through gRPC: outputs equal a cache-less server, usage reports
cached prompt tokens, tenants are isolated, opt-out and flush work, and nothing leaks."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from tests.conftest import wait_for_idle_pool
from tests.e2e.helpers import generate, stub_for

BLOCK_SIZE = 16  # EngineConfig default, used by both servers


def _request(system: str, question: str, max_output_tokens: int = 12, **scheduling) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        chat=types_pb.ChatInput(messages=[
            types_pb.ChatMessage(role="system", content=system),
            types_pb.ChatMessage(role="user", content=question),
        ]),
        sampling=types_pb.SamplingParameters(temperature=0.0),
        stopping=types_pb.StoppingCriteria(max_output_tokens=max_output_tokens),
        scheduling=types_pb.SchedulingOptions(**scheduling),
    )


def _system_prompt(words: int) -> str:
    """A unique system prompt; varying `words` makes shared prefixes end mid-block."""
    return f"Session {uuid.uuid4().hex}. You are a careful assistant. " + " ".join(["Be brief."] * words)


@pytest.fixture(scope="module")
def cache_off(smollm2_dir):
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.served_model import build_served_model
    from arbi_grpc.server import GrpcServer

    server = GrpcServer(build_served_model(EngineConfig(model=str(smollm2_dir), kv_cache_memory_mib=128,
                                                        enable_prefix_cache=False))).start()
    channel, stub = stub_for(server.target)
    yield stub
    channel.close()
    server.stop()


def test_outputs_equal_a_server_without_cache(stub, cache_off, served_smollm2) -> None:
    requests = []
    for words in (3, 11, 26):
        system = _system_prompt(words)
        requests += [_request(system, q) for q in ("What is 2 + 2?", "Name a fruit.", "What is 2 + 2? Why?")]
    expected = [generate(cache_off, r).token_ids for r in requests]
    first_pass = [generate(stub, r) for r in requests]
    assert [c.token_ids for c in first_pass] == expected
    assert any(c.last.usage.cached_prompt_token_count > 0 for c in first_pass)  # shared system prompts
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:  # concurrent, everything cached now
        second_pass = list(pool.map(lambda r: generate(stub, r), requests))
    assert [c.token_ids for c in second_pass] == expected
    for completion in second_pass:
        usage = completion.last.usage
        assert usage.cached_prompt_token_count % BLOCK_SIZE == 0
        assert usage.prompt_token_count - BLOCK_SIZE <= usage.cached_prompt_token_count < usage.prompt_token_count


def test_cancelled_requests_sharing_blocks_do_not_disturb_others(stub, cache_off, served_smollm2) -> None:
    system = _system_prompt(17)
    keep = [_request(system, f"Tell me about the number {i}.", max_output_tokens=20) for i in range(4)]
    cancel = [_request(system, f"Write a long essay about the year {1900 + i}.", max_output_tokens=200)
              for i in range(4)]
    expected = [generate(cache_off, r).token_ids for r in keep]

    def cancelled(request: pb.GenerateRequest) -> None:
        call = stub.Generate(request)
        for index, _ in enumerate(call):
            if index == 3:
                call.cancel()
                break

    with ThreadPoolExecutor(max_workers=8) as pool:
        kept = [pool.submit(generate, stub, r) for r in keep]
        for r in cancel:
            pool.submit(cancelled, r)
    assert [f.result().token_ids for f in kept] == expected
    wait_for_idle_pool(served_smollm2.served.engine)


def test_tenants_never_share_cached_blocks(stub, served_smollm2) -> None:
    system = _system_prompt(30)
    engine = served_smollm2.served.engine
    warm = generate(stub, _request(system, "Hello!", tenant_id="tenant-a"))
    assert warm.last.usage.cached_prompt_token_count == 0
    hits_before = engine.scheduler.block_manager.prefix_cache.stats.hits_by_namespace.get("tenant-b", 0)
    other = generate(stub, _request(system, "Hello!", tenant_id="tenant-b"))
    assert other.last.usage.cached_prompt_token_count == 0
    assert engine.scheduler.block_manager.prefix_cache.stats.hits_by_namespace.get("tenant-b", 0) == hits_before
    same = generate(stub, _request(system, "Hello!", tenant_id="tenant-a"))
    assert same.last.usage.cached_prompt_token_count > 0
    assert same.token_ids == warm.token_ids == other.token_ids


def test_opt_out_neither_reads_nor_writes(stub) -> None:
    system = _system_prompt(20)
    skipped = generate(stub, _request(system, "Hi.", skip_prefix_cache=True))
    assert skipped.last.usage.cached_prompt_token_count == 0
    after = generate(stub, _request(system, "Hi."))
    assert after.last.usage.cached_prompt_token_count == 0  # the opted-out request cached nothing
    again = generate(stub, _request(system, "Hi.", skip_prefix_cache=True))
    assert again.last.usage.cached_prompt_token_count == 0
    assert skipped.token_ids == after.token_ids == again.token_ids


def test_admin_flush_empties_the_cache(stub, served_smollm2) -> None:
    import grpc

    from arbi_client.arbi.v1 import admin_service_pb2 as admin_pb
    from arbi_client.arbi.v1 import admin_service_pb2_grpc as admin_grpc

    engine = served_smollm2.served.engine
    metadata = (("authorization", f"Bearer {served_smollm2.credentials.admin_token}"),)
    channel = grpc.insecure_channel(served_smollm2.target)
    admin = admin_grpc.AdminServiceStub(channel)
    system = _system_prompt(25)
    generate(stub, _request(system, "One.", tenant_id="flush-a"))
    generate(stub, _request(system, "One.", tenant_id="flush-b"))
    flushed_a = admin.FlushPrefixCache(admin_pb.FlushPrefixCacheRequest(tenant_id="flush-a"), metadata=metadata)
    assert flushed_a.flushed_block_count > 0
    assert generate(stub, _request(system, "One.", tenant_id="flush-a")).last.usage.cached_prompt_token_count == 0
    assert generate(stub, _request(system, "One.", tenant_id="flush-b")).last.usage.cached_prompt_token_count > 0
    admin.FlushPrefixCache(admin_pb.FlushPrefixCacheRequest(), metadata=metadata)
    assert engine.stats().num_cached_blocks == 0
    assert engine.scheduler.block_manager.num_evictable_blocks == 0
    with pytest.raises(grpc.RpcError) as refused:
        admin.FlushPrefixCache(admin_pb.FlushPrefixCacheRequest())
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    channel.close()


def test_prompt_logprobs_are_complete_when_the_prefix_is_cached(stub) -> None:
    """A request for prompt log-probabilities needs every prompt position's logits, so a cached prefix must not
    shorten them: the second, identical request gets the same full list."""
    request = _request(_system_prompt(30), "What is 2 + 2?", max_output_tokens=1)
    request.logprobs.include_prompt_logprobs = True
    plain = _request(request.chat.messages[0].content, "What is 2 + 2?", max_output_tokens=1)
    generate(stub, plain)  # caches the prompt's blocks
    first, second = generate(stub, request), generate(stub, request)
    prompt_count = first.last.usage.prompt_token_count
    for completion in (first, second):
        assert len(completion.responses[0].prompt_tokens) == prompt_count
    assert [t.logprob for t in first.responses[0].prompt_tokens] == pytest.approx(
        [t.logprob for t in second.responses[0].prompt_tokens], abs=1e-5)
