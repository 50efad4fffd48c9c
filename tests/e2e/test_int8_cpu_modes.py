"""The CPU's two 8-bit modes through a real gRPC server (one boot each) against the session's server (auto: the GGUF
import's blocks as stored, whose products are the dequantized float32 model's up to accumulation order), the real
SmolLM2: `--cpu-weights int8` (the float32 weights re-quantized to per-row int8) and `--cpu-activations int8` (the
blocks as stored times int8-quantized activations). Each: greedy answers equal up to near-ties (where an answer
departs, float32 rated the 8-bit choice within 0.75 nats of its own), prompt log-probabilities of a wikitext window
within a stated tolerance and its mean loss within 0.5%; the measured weight bytes are `plan`'s, and the pool is
free after.

The tolerances are measured (benchmarks/tkv_perplexity.py, docs/cpu_weights.md): int8 weights move a token's loss
by 0.060 nats on average (1.48 at most over 6,132 wikitext tokens) without biasing it, so greedy answers part at
near-ties: over 20 chat prompts, float32's margin at the departures was 0.40 nats at most. Int8 activations raise
wikitext-2 perplexity by 0.5% and part at margins of at most 0.15 nats.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb

from arbi_grpc.cli import main as cli_main
from arbi_grpc.config import EngineConfig
from arbi_grpc.models.block_linear_int8_dot import Int8DotLinear
from arbi_grpc.models.int8_weights import Int8Linear
from arbi_grpc.served_model import build_served_model
from tests.conftest import wait_for_idle_pool
from tests.e2e.helpers import generate, stub_for

WIKITEXT = Path(__file__).resolve().parents[1] / "data" / "wikitext-2" / "wiki.test.raw"
WINDOW_TOKENS = 256
PROMPTS = (
    "What is the capital of France?", "Name three primary colors.", "How many legs does a spider have?",
    "Who wrote Romeo and Juliet?", "What does a CPU do?", "Why is the sky blue?",
)
ANSWER_TOKENS = 16
NEAR_TIE_NATS = 0.75
MAX_LOGPROB_CHANGE, MEAN_LOGPROB_CHANGE = 1.5, 0.08


# mode: (its flags, the kernel of the layers' matrices)
MODES = {
    "int8 weights": ({"cpu_weights": "int8"}, Int8Linear),
    "int8 activations": ({"cpu_activations": "int8"}, Int8DotLinear),
}


@pytest.fixture(scope="module", params=list(MODES))
def int8_server(request, smollm2_dir: Path) -> Iterator:
    from arbi_grpc.server import GrpcServer

    settings, kernel = MODES[request.param]
    config = EngineConfig(model=str(smollm2_dir), kv_cache_memory_mib=32, max_running_requests=8,
                          max_waiting_requests=16, **settings)
    server = GrpcServer(build_served_model(config)).start()
    assert isinstance(server.served.engine.runner.model.model.layers[0].mlp.gate_up, kernel)
    yield server
    server.stop()


def _generate(server, token_ids: list[int], max_output_tokens: int, prompt_logprobs: bool = False):
    channel, stub = stub_for(server.target)
    request = pb.GenerateRequest(
        token_ids=types_pb.TokenIds(ids=token_ids),
        sampling=types_pb.SamplingParameters(temperature=0.0),
        stopping=types_pb.StoppingCriteria(max_output_tokens=max_output_tokens, ignore_eos=True),
        logprobs=types_pb.LogprobOptions(include_prompt_logprobs=prompt_logprobs),
    )
    with channel:
        return generate(stub, request)


def _prompt_logprobs(server, token_ids: list[int]) -> list[float]:
    prompt_tokens = list(_generate(server, token_ids, 1, prompt_logprobs=True).responses[0].prompt_tokens)
    assert len(prompt_tokens) == len(token_ids)
    return [token.logprob for token in prompt_tokens[1:]]


def test_greedy_answers_equal_up_to_near_ties(served_smollm2, int8_server) -> None:
    template = served_smollm2.served.inputs.chat_template
    identical = 0
    for prompt in PROMPTS:
        prompt_ids = list(template.encode([{"role": "user", "content": prompt}]))
        expected = _generate(served_smollm2, prompt_ids, ANSWER_TOKENS)
        actual = _generate(int8_server, prompt_ids, ANSWER_TOKENS).token_ids
        departure = next((i for i, (a, b) in enumerate(zip(actual, expected.token_ids)) if a != b), None)
        if departure is None:
            identical += 1
            continue
        # float32's log-probability of its own choice there, and of the int8 server's
        own = [token.logprob for response in expected.responses for token in response.tokens][departure]
        taken = _prompt_logprobs(served_smollm2, prompt_ids + actual[: departure + 1])[-1]
        assert own - taken <= NEAR_TIE_NATS, (prompt, departure, own, taken)
    assert identical >= 1  # and not every answer departs
    wait_for_idle_pool(int8_server.served.engine)


def test_prompt_logprobs_agree_within_tolerance(served_smollm2, int8_server) -> None:
    text = WIKITEXT.read_text(encoding="utf-8")[:10_000]
    window = served_smollm2.served.inputs.tokenizer.encode(text, add_special_tokens=False)[:WINDOW_TOKENS]
    expected, actual = _prompt_logprobs(served_smollm2, window), _prompt_logprobs(int8_server, window)
    changes = [abs(a - b) for a, b in zip(actual, expected, strict=True)]
    assert actual != expected  # the 8-bit server's layers ran other products
    assert max(changes) <= MAX_LOGPROB_CHANGE and sum(changes) / len(changes) <= MEAN_LOGPROB_CHANGE, max(changes)
    assert math.isclose(sum(actual), sum(expected), rel_tol=0.005)  # the window's mean loss within 0.5%
    wait_for_idle_pool(int8_server.served.engine)


def test_plan_counts_the_measured_weight_bytes(int8_server, smollm2_dir: Path, capsys) -> None:
    served = int8_server.served
    code = cli_main(["plan", "--json", "--no-audio", "--model", str(smollm2_dir), "--cpu-weights",
                     served.config.cpu_weights, "--cpu-activations", served.config.cpu_activations,
                     "--kv-cache-memory-mib", str(served.config.kv_cache_memory_mib)])
    assert code == 0
    planned = json.loads(capsys.readouterr().out)["components"]["weights"]["bytes"]
    measured = served.memory_budget.component("weights").num_bytes
    float32 = 134_515_008 * 4
    assert planned == measured and measured < 0.45 * float32, (planned, measured, float32)
