"""The TKV engine on CUDA (Triton kernels, CUDA graphs, overlapped steps) with an exact window of 2 and 4 blocks,
against the CPU torch reference with the same weights, calibration and window.

Without the prefix cache every generated token is re-scored by the CPU TKV engine (a fresh prefill reads the same
window exactly). With it, a prompt repeated after an unrelated request (which filled the same tail slot) reuses
blocks whose part in the first query's window the engine seeds decoded into the tail slot before the step: once as
a one-token first chunk (a decode graph replay right after the seeding), once as a prefill chunk. Its tokens are
re-scored on the CPU model by hand with the same reuse and seeding (`TkvPagedKVCache.seed_tail`).
"""

from __future__ import annotations

import random

import pytest
import torch

from arbi_grpc.attention.selection import select_attention_backend
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.host_to_device import tensor_on_device_no_sync
from arbi_grpc.engine.offline import generate
from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache
from arbi_grpc.models.decoder import CausalLM
from arbi_grpc.models.random_weights import random_causal_lm
from tests.gpu.engine_pair import (
    build_engine,
    greedy_requests,
    on_device,
    rescore_on_cpu,
    smollm2_layers_with_k4v4,
    worst_logprob_gap,
)
from tests.unit.models.paged_harness import PagedStepRunner

TOLERANCE = 0.05  # the GPU TKV engine's bound against the CPU reference (test_tkv_engine_cuda.py says why)
BLOCK_SIZE = 16


def _setup(exact_blocks: int, enable_prefix_cache: bool):
    config, calibration = smollm2_layers_with_k4v4(4)
    common = {"max_model_len": 1024, "max_step_tokens": 160, "max_prefill_chunk_tokens": 64,
              "kv_cache_memory_mib": 256, "kv_cache_dtype": "tkv", "kv_calibration": "random",
              "kv_exact_blocks": exact_blocks, "enable_prefix_cache": enable_prefix_cache, "block_size": BLOCK_SIZE,
              "kv_prefill_exact": "window"}  # chunk-free numbers: a prefill re-scores decodes
    cpu_config = EngineConfig(device="cpu", attention_backend="torch", max_running_requests=16, **common)
    gpu_config = EngineConfig(device="cuda", dtype="float32", attention_backend="triton", max_running_requests=4,
                              cuda_graph_max_batch=4, **common)
    cpu_model = random_causal_lm(config, torch.float32, "cpu", seed=3,
                                 attention_backend=select_attention_backend(cpu_config))
    return config, calibration, cpu_config, gpu_config, cpu_model


@pytest.mark.parametrize("exact_blocks", [2, 4])
def test_gpu_generation_with_a_wide_window_is_rescored_by_the_cpu_engine(exact_blocks: int) -> None:
    config, calibration, cpu_config, gpu_config, cpu_model = _setup(exact_blocks, enable_prefix_cache=False)
    cpu_engine = build_engine(cpu_model, config, cpu_config, calibration)
    gpu_engine = build_engine(on_device(cpu_model, config, gpu_config), config, gpu_config, calibration)
    try:
        generator = torch.Generator().manual_seed(11)
        prompts = [torch.randint(0, config.vocab_size, (n,), generator=generator).tolist()
                   for n in (1, 17, 40, 70, 300, 5, 130, 33, 64)]  # more requests than slots, chunked prefills
        done = generate(gpu_engine, greedy_requests(prompts, 40))  # decodes cross several block boundaries
        worst = worst_logprob_gap(done, rescore_on_cpu(cpu_engine, prompts, done))
        print(f"exact_blocks {exact_blocks}: worst generated-token logprob gap {worst:.4f}")
        assert worst < TOLERANCE, worst
    finally:
        cpu_engine.shutdown()
        gpu_engine.shutdown()


def _cpu_logprobs_with_a_seeded_prefix(model: CausalLM, calibration: TkvCalibration, exact_blocks: int,
                                       tokens: list[int], prompt_len: int, reused_blocks: int) -> list[float]:
    """CPU logprobs of tokens[prompt_len:] when tokens[:reused_blocks * BLOCK_SIZE] come from the prefix cache:
    prefilled in slot 0, the window's reused blocks seeded into slot 1, the rest prefilled in slot 1."""
    cache = TkvPagedKVCache(calibration, num_blocks=64, block_size=BLOCK_SIZE, device="cpu", num_tail_slots=2,
                            exact_blocks=exact_blocks)
    runner = PagedStepRunner(block_size=BLOCK_SIZE, num_blocks=64, rng=random.Random(0))
    reused = reused_blocks * BLOCK_SIZE
    runner.run_model(model, cache, {0: tokens[:reused]}, [[(0, reused)]])
    runner.block_tables[1], runner.processed[1] = runner.block_tables[0][:reused_blocks], reused
    first_seeded = max(0, reused_blocks - exact_blocks + 1)
    cache.seed_tail(1, torch.tensor(runner.block_tables[1][first_seeded:]), first_seeded)
    logits = runner.run_model(model, cache, {1: tokens}, [[(1, len(tokens) - 1 - reused)]])[1]
    logprobs = torch.log_softmax(logits.float(), dim=-1)  # row r: position reused + r predicts token reused + r + 1
    return [logprobs[position - 1 - reused, tokens[position]].item() for position in range(prompt_len, len(tokens))]


@pytest.mark.parametrize("exact_blocks", [2, 4])
def test_a_prefix_hit_on_the_gpu_reads_its_seeded_window_blocks_decoded(exact_blocks: int) -> None:
    config, calibration, _, gpu_config, cpu_model = _setup(exact_blocks, enable_prefix_cache=True)
    gpu_engine = build_engine(on_device(cpu_model, config, gpu_config), config, gpu_config, calibration)
    generator = torch.Generator().manual_seed(7)
    first = torch.randint(0, config.vocab_size, (90,), generator=generator).tolist()
    unrelated = torch.randint(0, config.vocab_size, (75,), generator=generator).tolist()
    repeats = {  # prompt -> the prefix-cache blocks it reuses
        "one-token chunk": (first[:4 * BLOCK_SIZE + 1], 4),
        "prefill chunk": (first[:2 * BLOCK_SIZE + 5]
                          + torch.randint(0, config.vocab_size, (30,), generator=generator).tolist(), 2),
    }
    worst = 0.0
    try:
        for name, (prompt, reused_blocks) in repeats.items():
            generate(gpu_engine, greedy_requests([first], 8))
            generate(gpu_engine, greedy_requests([unrelated], 8))  # fills tail slot 0 with other rows
            hits_before = gpu_engine.stats().prefix_cache_hit_tokens
            done = generate(gpu_engine, greedy_requests([prompt], 24))[0]
            assert gpu_engine.stats().prefix_cache_hit_tokens - hits_before == reused_blocks * BLOCK_SIZE, name
            expected = _cpu_logprobs_with_a_seeded_prefix(cpu_model, calibration, exact_blocks,
                                                          prompt + done.token_ids, len(prompt), reused_blocks)
            gap = max(abs(g - c) for g, c in zip(done.logprobs, expected))
            print(f"exact_blocks {exact_blocks}, {name}: worst generated-token logprob gap {gap:.4f}")
            worst = max(worst, gap)
        assert worst < TOLERANCE, worst
    finally:
        gpu_engine.shutdown()


def test_seeding_a_tail_slot_waits_for_nothing_on_the_host() -> None:
    """The runner seeds in the launch path, which never waits for the device (test_launch_without_host_waits.py)."""
    config, calibration = smollm2_layers_with_k4v4(2)
    cache = TkvPagedKVCache(calibration, num_blocks=8, block_size=BLOCK_SIZE, device="cuda", num_tail_slots=2,
                            exact_blocks=4)
    for layer in range(config.num_layers):
        storage = cache.layer(layer)
        for tensor in (storage.key_codes, storage.value_codes):
            tensor.random_(0, 256)
        for tensor in (storage.key_metadata, storage.value_metadata):
            tensor.uniform_(0.01, 1.0)
    block_ids = tensor_on_device_no_sync([3, 5, 1], torch.int64, "cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        cache.seed_tail(1, block_ids, first_block_index=2)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    for layer in range(config.num_layers):
        storage = cache.layer(layer)
        keys, _ = storage.decoded_blocks(block_ids)
        ring_blocks = storage.key_tail[1].view(4, BLOCK_SIZE, *storage.key_tail.shape[2:])
        assert torch.equal(ring_blocks[[2, 3, 0]], keys.half())  # blocks 2, 3, 4 of the sequence
        assert not ring_blocks[1].any() and not storage.key_tail[0].any()
