"""Batch slots through the CUDA decode graphs: a TKV engine on CUDA whose four batch slots are shared out in turn among
twelve requests (overlapped steps, a shared prefix, batches padded up to a captured size) stages each replay's
slots into the graphs' static buffer, padding rows on slot 0, and generates what the CPU TKV engine scores."""

from __future__ import annotations

import torch

from arbi_grpc.attention.selection import select_attention_backend
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.cuda_graphs import DecodeBatch
from arbi_grpc.engine.offline import generate
from arbi_grpc.models.random_weights import random_causal_lm
from tests.gpu.engine_pair import (
    build_engine,
    greedy_requests,
    on_device,
    rescore_on_cpu,
    smollm2_layers_with_k4v4,
    worst_logprob_gap,
)

TOLERANCE = 0.05  # the GPU TKV engine's bound against the CPU reference (test_tkv_engine_cuda.py says why)


def test_replays_stage_the_scheduled_batch_slots_and_generate_what_the_cpu_engine_scores() -> None:
    config, calibration = smollm2_layers_with_k4v4(4)
    common = {"max_model_len": 512, "max_step_tokens": 96, "max_prefill_chunk_tokens": 64,
              "enable_prefix_cache": True, "kv_cache_memory_mib": 256, "kv_cache_dtype": "tkv",
              "kv_calibration": "random", "kv_prefill_exact": "window"}  # rescoring needs chunk-free numbers
    cpu_config = EngineConfig(device="cpu", attention_backend="torch", max_running_requests=16, **common)
    gpu_config = EngineConfig(device="cuda", dtype="float32", attention_backend="triton", max_running_requests=4,
                              cuda_graph_max_batch=4, **common)
    cpu_model = random_causal_lm(config, torch.float32, "cpu", seed=3,
                                 attention_backend=select_attention_backend(cpu_config))
    cpu_engine = build_engine(cpu_model, config, cpu_config, calibration)
    gpu_engine = build_engine(on_device(cpu_model, config, gpu_config), config, gpu_config, calibration)
    graphs = gpu_engine.runner.decode_graphs
    replay = graphs.run
    padded_replays, slots_apart_from_rows = [], []

    def checked_replay(batch: DecodeBatch) -> torch.Tensor:
        logits = replay(batch)
        torch.cuda.synchronize()
        size = next(size for size in graphs.batch_sizes if size >= len(batch.batch_slots))
        padding = size - len(batch.batch_slots)
        assert graphs._batch_slots[:size].tolist() == list(batch.batch_slots) + [0] * padding
        assert len(set(batch.batch_slots)) == len(batch.batch_slots)
        padded_replays.append(padding > 0)
        slots_apart_from_rows.append(batch.batch_slots != list(range(len(batch.batch_slots))))
        return logits

    graphs.run = checked_replay
    try:
        generator = torch.Generator().manual_seed(13)
        shared = torch.randint(0, config.vocab_size, (40,), generator=generator).tolist()
        prompts = [shared + torch.randint(0, config.vocab_size, (n,), generator=generator).tolist()
                   for n in (1, 9, 16, 70, 3, 5, 130, 2, 33, 12, 7, 50)]
        done = generate(gpu_engine, greedy_requests(prompts, 16))
        worst = worst_logprob_gap(done, rescore_on_cpu(cpu_engine, prompts, done))
        print(f"{len(padded_replays)} graph replays ({sum(padded_replays)} padded, {sum(slots_apart_from_rows)} "
              f"with slots apart from rows); worst generated-token logprob gap {worst:.4f}")
        assert worst < TOLERANCE, worst
        if not (any(padded_replays) and any(slots_apart_from_rows)):
            # The schedule did not replay a padded batch or slots out of row order: stage one by hand (three rows
            # padded to the graph of four, slots out of order); checked_replay compares the static buffer.
            by_hand = DecodeBatch(input_ids=[1, 2, 3], positions=[0, 0, 0], slots=[-1, -1, -1], seq_lens=[1, 1, 1],
                                  block_tables=[[0], [0], [0]], batch_slots=[3, 1, 2])
            gpu_engine.call(lambda: graphs.run(by_hand)).result(timeout=60)
        assert any(padded_replays) and any(slots_apart_from_rows)
        assert gpu_engine.call(lambda: gpu_engine.scheduler.batch_slots.num_taken).result(timeout=30) == 0
    finally:
        cpu_engine.shutdown()
        gpu_engine.shutdown()
