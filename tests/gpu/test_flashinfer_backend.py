"""The FlashInfer backend (`--attention-backend flashinfer`) on the GPU: its forward over the bf16 paged cache
against the float32 torch reference (ragged decode batches, prefill chunks over cached prefixes, mixed steps; head
dims 64/128, GQA 1/4/8, pages 16/32, contexts up to 3,001 tokens), and the engine with random weights against the
same engine on the Triton backend. Skipped without CUDA or without flashinfer.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch

from arbi_grpc.attention.flashinfer_paged import FlashInferPagedAttention
from arbi_grpc.attention.metadata import AttentionMetadata
from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.attention.selection import select_attention_backend
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.offline import CompletedRequest, generate
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.decoder import CausalLM
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.models.reference_shapes import model_config_for_shape
from tests.gpu.engine_pair import build_engine, greedy_requests
from tests.kernels.paged_batches import tolerance
from tests.kernels.reference import (
    paged_prefill_attention_reference,
    write_kv_cache_reference,
)

pytest.importorskip("flashinfer", reason="needs flashinfer-python (see docs/flashinfer.md)")

NUM_KV_HEADS = 2
NUM_LAYERS = 2  # the second layer of each step runs on the plan made for the first
NUM_BLOCKS = 1024
# (query_len, seq_len) per sequence; seq_len - query_len tokens are already cached. Contexts on and off page edges.
STEPS = {
    "ragged decode": [(1, 1), (1, 17), (1, 300), (1, 1024), (1, 2049), (1, 3001), (1, 64), (1, 33)],
    "prefill over cached prefixes": [(200, 200), (37, 1500), (128, 2000), (16, 16), (5, 3001), (64, 96)],
    "mixed": [(1, 2500), (90, 700), (1, 1), (1, 48), (33, 33), (250, 3000)],
}


def _noise_cache(head_dim: int, block_size: int, generator: torch.Generator) -> PagedKVCache:
    """A bf16 cache full of noise, so a read outside a sequence's context shows in the output."""
    cache = PagedKVCache(num_layers=NUM_LAYERS, num_blocks=NUM_BLOCKS, block_size=block_size,
                         num_kv_heads=NUM_KV_HEADS, head_dim=head_dim, dtype=torch.bfloat16, device="cuda")
    for layer_cache in cache.key_caches + cache.value_caches:
        layer_cache.copy_(torch.randn(layer_cache.shape, generator=generator, device="cuda"))
    return cache


def _random_step(step: list[tuple[int, int]], block_size: int, rng: random.Random) -> AttentionMetadata:
    """The step's metadata over block tables drawn from a shuffled pool (never contiguous, wider than needed)."""
    free = list(range(NUM_BLOCKS))
    rng.shuffle(free)
    tables = []
    for _, seq_len in step:
        tables.append([free.pop() for _ in range(-(-seq_len // block_size) + rng.randint(0, 2))])
    return AttentionMetadata.build(query_lens=[q for q, _ in step], seq_lens=[s for _, s in step],
                                   block_tables=tables, block_size=block_size, device="cuda")


@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("group_size", [1, 4, 8])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_forward_matches_the_reference_and_plans_once_per_step(head_dim: int, group_size: int, block_size: int,
                                                               generator: torch.Generator,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    backend = FlashInferPagedAttention.for_dtypes("bfloat16", "bfloat16")
    plans = []
    original_plan = FlashInferPagedAttention._plan
    monkeypatch.setattr(FlashInferPagedAttention, "_plan",
                        lambda self, metadata, *rest: (plans.append(metadata), original_plan(self, metadata, *rest)))
    cache = _noise_cache(head_dim, block_size, generator)
    rng = random.Random(int(torch.randint(0, 2**31, (1,), generator=generator, device="cuda")))
    num_heads = group_size * NUM_KV_HEADS
    schedule = ["ragged decode", "prefill over cached prefixes", "mixed", "ragged decode"]  # re-plans each way
    with torch.inference_mode():
        for name in schedule:
            metadata = _random_step(STEPS[name], block_size, rng)
            for layer in range(NUM_LAYERS):
                query, key, value = (
                    torch.randn((metadata.num_tokens, heads, head_dim), generator=generator, device="cuda").bfloat16()
                    for heads in (num_heads, NUM_KV_HEADS, NUM_KV_HEADS)
                )
                expected_key_cache, expected_value_cache = (c.clone() for c in cache.layer(layer))
                write_kv_cache_reference(key, value, expected_key_cache, expected_value_cache, metadata.slot_mapping)

                actual = backend.forward(layer, query, key, value, metadata, cache)

                key_cache, value_cache = cache.layer(layer)
                assert torch.equal(key_cache, expected_key_cache) and torch.equal(value_cache, expected_value_cache)
                expected = paged_prefill_attention_reference(
                    query, key_cache, value_cache, metadata.block_tables, metadata.query_start_loc,
                    metadata.seq_lens, head_dim**-0.5)
                torch.testing.assert_close(actual, expected, **tolerance(torch.bfloat16))
    assert len(plans) == len({id(metadata) for metadata in plans}) == len(schedule)  # per step, not per layer


# The bf16 logprob tolerance of test_engine_cuda. The logprobs of the tokens both engines chose must agree within it,
# and a greedy divergence is accepted only where FlashInfer's own logprobs put the two candidates within it (a
# near-tie that bf16 rounding may flip); the two continuations are not compared past it.
BF16_LOGPROB_TOLERANCE = 0.15


@pytest.mark.parametrize("shape", ["smollm2-135m", "qwen3-0.6b"])  # head_dim 64 GQA 3; head_dim 128 GQA 2
def test_engine_greedy_tokens_equal_the_triton_engines(shape: str) -> None:
    config = model_config_for_shape(shape)
    if shape == "qwen3-0.6b":
        config = replace(config, num_layers=6)  # each layer is the real shape
    triton_config = EngineConfig(device="cuda", dtype="bfloat16", attention_backend="triton", max_model_len=512,
                                 max_running_requests=16, max_step_tokens=96, max_prefill_chunk_tokens=64,
                                 enable_prefix_cache=True, kv_cache_memory_mib=512, cuda_graph_max_batch=16)
    flashinfer_config = replace(triton_config, attention_backend="flashinfer")
    model = random_causal_lm(config, torch.bfloat16, "cuda", seed=3,
                             attention_backend=select_attention_backend(triton_config))
    generator = torch.Generator().manual_seed(11)
    shared = torch.randint(0, config.vocab_size, (40,), generator=generator).tolist()
    prompts = [shared + torch.randint(0, config.vocab_size, (n,), generator=generator).tolist()
               for n in (1, 7, 16, 33, 90, 150, 5, 61, 17, 2, 120, 3)]  # ragged, shared prefix, > one chunk

    triton_done = _generate(model, config, triton_config, prompts)
    flashinfer_backend = select_attention_backend(flashinfer_config)
    for layer in model.model.layers:
        layer.self_attn.backend = flashinfer_backend
    flashinfer_done = _generate(model, config, flashinfer_config, prompts)
    # FlashInfer's logprob of every token the Triton engine chose, through its prefill path (chunks, cached prefix).
    rescored = _generate(model, config, flashinfer_config,
                         [p + r.token_ids for p, r in zip(prompts, triton_done)], prompt_logprobs=True)

    equal_outputs = 0
    for prompt, ours, theirs, scored in zip(prompts, flashinfer_done, triton_done, rescored):
        their_logprobs_under_flashinfer = scored.prompt_logprobs[len(prompt):]
        for index, (token, their_token) in enumerate(zip(ours.token_ids, theirs.token_ids)):
            if token != their_token:
                margin = ours.logprobs[index] - their_logprobs_under_flashinfer[index]
                assert margin < BF16_LOGPROB_TOLERANCE, (ours.request_id, index, margin)
                break
            assert abs(ours.logprobs[index] - theirs.logprobs[index]) < BF16_LOGPROB_TOLERANCE, (ours.request_id, index)
        else:
            equal_outputs += 1
    print(f"{shape}: greedy outputs equal to the Triton engine's: {equal_outputs}/{len(prompts)}")


def _generate(model: CausalLM, config: ModelConfig, engine_config: EngineConfig, prompts: list[list[int]],
              prompt_logprobs: bool = False) -> list[CompletedRequest]:
    """20 greedy tokens per prompt (or one, with the prompt's logprobs) from an engine over `model` as it is."""
    engine = build_engine(model, config, engine_config)
    try:
        # Decode graphs are captured for a graph-safe backend only: FlashInfer's decode steps run eagerly.
        assert (engine.runner.decode_graphs is not None) == model.model.layers[0].self_attn.backend.cuda_graph_safe
        return generate(engine, greedy_requests(prompts, 1 if prompt_logprobs else 20, prompt_logprobs))
    finally:
        engine.shutdown()
