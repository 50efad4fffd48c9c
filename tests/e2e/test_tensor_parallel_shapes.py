"""Tensor parallelism on random-weight Llama and Qwen3 shapes (CPU, gloo): an engine at two ranks gives the
greedy tokens and prompt log-probabilities of the one-rank engine, through chunked prefill and a prefix-cache
hit, after idling long enough for rank 0's keepalives, and its KV pool is free afterwards. Qwen3 carries q/k/v
and output-projection biases (the latter held by rank 0 alone) and per-head q/k norms; Llama has an untied LM
head."""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.offline import generate
from arbi_grpc.engine.request import GenerationRequest
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.parallel import launch
from arbi_grpc.models.random_weights import write_random_checkpoint
from arbi_grpc.served_model import build_served_model
from tests.conftest import wait_for_idle_pool

SHAPES = {
    "llama": {"architectures": ["LlamaForCausalLM"], "tie_word_embeddings": False},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "tie_word_embeddings": False, "head_dim": 32,
              "attention_bias": True},
}
COMMON = {"vocab_size": 49152, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
          "max_position_embeddings": 512, "bos_token_id": 1, "eos_token_id": 2}
PREFIX = tuple(range(100, 140))  # 40 tokens: two full blocks of 16 are reused by the second request
LOGPROB_TOLERANCE = 1e-4
KEEPALIVE_S = 0.3  # instead of launch.KEEPALIVE_S, so the idle engine sends some before the requests


@pytest.fixture(autouse=True)
def _torch_threads() -> Iterator[None]:
    """Rank 0 here is the test process: the threads it takes for its share of the cores go back afterwards."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _outputs(model_dir: Path, world_size: int) -> list[tuple[list[int], list[float], list[float]]]:
    served = build_served_model(EngineConfig(
        model=str(model_dir), tensor_parallel_size=world_size, kv_cache_memory_mib=8, max_model_len=256,
        max_running_requests=4, max_step_tokens=64, max_prefill_chunk_tokens=16, overlap_steps=True))
    try:
        time.sleep(5 * KEEPALIVE_S)
        results = []
        # One after the other: the second reuses the first's blocks; the third scores its prompt (no reuse).
        prompts = ((PREFIX + (5,), False), (PREFIX + (7, 8, 9), False), (tuple(range(300, 350)), True))
        for index, (prompt, scored) in enumerate(prompts):
            request = GenerationRequest(
                request_id=f"r{index}", prompt_token_ids=prompt,
                sampling=SamplingParams(temperature=0.0, prompt_logprobs=scored),
                stopping=StoppingParams(max_output_tokens=8, ignore_eos=True))
            completed = generate(served.engine, [request], timeout_s=120)[0]
            results.append((completed.token_ids, completed.logprobs, list((completed.prompt_logprobs or (None,))[1:])))
        assert served.engine.stats().prefix_cache_hit_tokens >= 32  # the second prompt's first two blocks
        assert all(prompt_logprobs for _, _, prompt_logprobs in results[2:])
        wait_for_idle_pool(served.engine)
        return results
    finally:
        served.engine.shutdown()


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_two_ranks_give_the_outputs_of_one(shape: str, smollm2_dir: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[str] = []

    def recording(message, input_ids=None) -> None:
        sent.append(message if isinstance(message, str) else "step")
        broadcast(message, input_ids)

    broadcast = launch.broadcast_message
    monkeypatch.setattr(launch, "KEEPALIVE_S", KEEPALIVE_S)
    monkeypatch.setattr(launch, "broadcast_message", recording)
    model_dir = write_random_checkpoint({**COMMON, **SHAPES[shape]}, tmp_path / shape, torch.float32, seed=11)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(smollm2_dir / name, model_dir / name)
    single, split = _outputs(model_dir, 1), _outputs(model_dir, 2)
    assert sent[0] == "keepalive" and sent.count("step") > 3 and sent[-1] == "stop", sent
    for (tokens, logprobs, prompt), (split_tokens, split_logprobs, split_prompt) in zip(single, split):
        assert split_tokens == tokens
        assert all(math.isclose(a, b, abs_tol=LOGPROB_TOLERANCE) for a, b in zip(logprobs + prompt,
                                                                                  split_logprobs + split_prompt))
