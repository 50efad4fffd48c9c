"""A worker rank (1..N-1) of a tensor-parallel model: `python -m arbi_grpc.parallel.worker`, started by rank 0
(`launch.WorkerRanks.start`). It joins the process group, loads its shard of the model and a KV pool of its KV
heads (as many blocks as rank 0's), reports ready at a barrier, profiles the largest step's activations with
rank 0 (the same `ProfileStep`, so the collectives pair up) and logs its memory, then runs each step rank 0
broadcasts until the stop. It samples nothing: its logits slice goes to rank 0 in the gather. Any error, a lost
rank 0 included (a collective fails or times out), ends the process with a non-zero exit and the traceback on
stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from arbi_grpc.attention.kv_storage import KVStorage
from arbi_grpc.attention.selection import TORCH_DTYPES, build_kv_cache, select_attention_backend
from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.engine.step_inputs import forward_logits, seed_reused_blocks
from arbi_grpc.memory.activation_profile import measure_activation_peak
from arbi_grpc.memory.estimate import step_detail
from arbi_grpc.memory.measure import tensor_bytes
from arbi_grpc.memory.profile_step import ProfileStep
from arbi_grpc.models.loader import load_model
from arbi_grpc.parallel.group import close_tensor_parallel_group, init_tensor_parallel_group, rank_device
from arbi_grpc.parallel.shard_plan import per_rank_model_config
from arbi_grpc.parallel.step_broadcast import KEEPALIVE, STOP, receive_message
from arbi_grpc.parallel.threads import set_rank_threads

log = logging.getLogger("arbi_grpc.parallel.worker")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="arbi_grpc.parallel.worker", description=__doc__)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--init-address", required=True, help="host:port of rank 0's TCP store")
    parser.add_argument("--model-dir", required=True, help="the resolved model directory")
    parser.add_argument("--num-blocks", type=int, required=True, help="KV blocks of the pool (rank 0's count)")
    parser.add_argument("--max-model-len", type=int, required=True, help="the context rank 0 serves")
    parser.add_argument("--config", required=True, help="the EngineConfig fields, as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s tensor-parallel rank {args.rank} %(levelname)s %(message)s")
    config = EngineConfig(**json.loads(args.config))
    set_rank_threads(config, args.world_size)
    device = rank_device(torch.device(config.device), args.rank)
    group = init_tensor_parallel_group(args.rank, args.world_size, args.init_address, device)
    try:
        model, model_config = load_model(Path(args.model_dir), dtype=TORCH_DTYPES[config.dtype], device=device,
                                         attention_backend=select_attention_backend(config), tensor_parallel=group)
        kv_cache = build_kv_cache(config, per_rank_model_config(model_config, args.world_size), args.num_blocks)
        dist.barrier()  # rank 0 waits here for every rank's shard and KV pool
        step = ProfileStep.worst_case(config.max_step_tokens, args.max_model_len, config.max_running_requests)
        activation_bytes = measure_activation_peak(model, kv_cache, step)  # with rank 0's `measure_budget`
        log.info("ready: %s shard %d of %d; memory of this rank: weights %.1f MiB, KV pool %.1f MiB (%d blocks), "
                 "activations %.1f MiB (%s)", model_config.architecture, args.rank, args.world_size,
                 tensor_bytes([*model.parameters(), *model.buffers()]) / MIB,
                 tensor_bytes([*kv_cache.key_caches, *kv_cache.value_caches]) / MIB, args.num_blocks,
                 activation_bytes / MIB, step_detail(step))
        steps = serve_steps(model, kv_cache, config.block_size, device)
        log.info("stopped by rank 0 after %d steps", steps)
    finally:
        close_tensor_parallel_group()
    return 0


@torch.inference_mode()
def serve_steps(model: torch.nn.Module, kv_cache: KVStorage, block_size: int, device: torch.device) -> int:
    """Runs rank 0's steps on this rank's shard until the stop; returns how many ran."""
    steps = 0
    while True:
        message, input_ids = receive_message(device)
        if message == STOP:
            return steps
        if message == KEEPALIVE:
            continue
        seed_reused_blocks(kv_cache, message)
        forward_logits(model, kv_cache, block_size, message, input_ids)
        steps += 1


if __name__ == "__main__":
    sys.exit(main())
