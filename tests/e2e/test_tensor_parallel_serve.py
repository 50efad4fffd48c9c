"""Tensor parallelism through the real server on the CPU (gloo): `arbi-serve serve --tensor-parallel-size 3`
on SmolLM2 (3 KV heads, one per rank) answers as the one-rank session server does, greedy tokens and prompt
log-probabilities alike; a shape the ranks cannot split is refused with its numbers; and a worker rank that
dies takes the server down with a non-zero exit."""

from __future__ import annotations

import math
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from arbi_grpc.config import EngineConfig
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.served_model import build_served_model
from tests.e2e.helpers import chat_request, generate, stub_for
from tests.e2e.serve_process import ServeProcess, start_serve

WORLD_SIZE = 3
LOGPROB_TOLERANCE = 1e-4  # fp32, summed across ranks in another order
EXIT_WAIT_S = 30


@pytest.fixture(scope="module")
def tensor_parallel_server(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    log = tmp_path_factory.mktemp("tensor-parallel") / "serve.log"
    served = start_serve(smollm2_dir, log, "--tensor-parallel-size", str(WORLD_SIZE), "--kv-cache-memory-mib", "32",
                         "--max-running-requests", "8", "--max-step-tokens", "256", "--no-audio")
    yield served
    served.stop()


def _requests() -> list[pb.GenerateRequest]:
    scored = pb.GenerateRequest(
        prompt="Paris is the capital and largest city of France. Its museums include",
        sampling=types_pb.SamplingParameters(temperature=0.0),
        stopping=types_pb.StoppingCriteria(max_output_tokens=12),
        logprobs=types_pb.LogprobOptions(include_prompt_logprobs=True),
    )
    return [scored, chat_request("Name three colours of the rainbow.", max_output_tokens=16)]


def test_three_ranks_answer_as_one(tensor_parallel_server: ServeProcess, stub) -> None:
    channel, sharded = stub_for(tensor_parallel_server.target)
    with channel:
        for request in _requests():
            single, split = generate(stub, request), generate(sharded, request)
            assert split.token_ids == single.token_ids and split.text == single.text
            single_prompt, split_prompt = single.responses[0].prompt_tokens, split.responses[0].prompt_tokens
            assert [t.token_id for t in split_prompt] == [t.token_id for t in single_prompt]
            for one, three in zip(single_prompt[1:], split_prompt[1:]):
                assert math.isclose(one.logprob, three.logprob, abs_tol=LOGPROB_TOLERANCE)
            single_tokens = [t for r in single.responses for t in r.tokens]
            split_tokens = [t for r in split.responses for t in r.tokens]
            for one, three in zip(single_tokens, split_tokens):
                assert math.isclose(one.logprob, three.logprob, abs_tol=LOGPROB_TOLERANCE)
    assert re.search(r"tensor-parallel rank 2 .*ready: LlamaForCausalLM shard 2 of 3", tensor_parallel_server.log())


def test_a_shape_that_cannot_split_is_refused_with_its_numbers(smollm2_dir: Path) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        build_served_model(EngineConfig(model=str(smollm2_dir), tensor_parallel_size=2))
    assert refused.value.field == "tensor_parallel_size"
    assert "num_attention_heads 9, num_key_value_heads 3 are not divisible by 2" in str(refused.value)


def test_a_lost_rank_stops_the_server(tensor_parallel_server: ServeProcess) -> None:
    """Last in the module: it ends the module's server."""
    pids = re.search(r"started ranks 1\.\.2 \(pids (\d+), (\d+)\)", tensor_parallel_server.log())
    assert pids is not None, tensor_parallel_server.log()
    os.kill(int(pids.group(2)), signal.SIGKILL)
    exit_code = tensor_parallel_server.process.wait(timeout=EXIT_WAIT_S)
    log = tensor_parallel_server.log()
    assert exit_code != 0, log
    assert f"tensor-parallel rank 2 (pid {pids.group(2)}) exited with code -9" in log
    with pytest.raises(ProcessLookupError):  # the other worker went down (and was reaped) with the server
        os.kill(int(pids.group(1)), 0)
