"""`arbi-serve plan --model M --max-context N [--device cuda]`: the memory budget a `serve` with the same flags
would need, estimated from the model's config.json or GGUF metadata alone (no weights are read, torch is not
needed; a directory holding only config.json is enough), or from a real model's shape by name (`--shape`).
Exit status 2, with the boot's message, when it would not fit.
"""

from __future__ import annotations

import argparse
import json

from arbi_grpc.commands.table import print_table
from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.config_flags import add_flags, resolve
from arbi_grpc.models.reference_shapes import REFERENCE_SHAPES


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "plan", help="estimate the memory budget of a serve config without loading weights",
        description="Takes the serve engine flags; --max-context is --max-model-len.",
    )
    parser.add_argument("--max-context", dest="max_model_len", type=int, default=None, metavar="N",
                        help="longest sequence to serve (same as --max-model-len)")
    parser.add_argument("--shape", choices=sorted(REFERENCE_SHAPES), default=None,
                        help="estimate for a real model's shape instead of --model (no file needed)")
    parser.add_argument("--json", action="store_true", help="print the budget as JSON")
    parser.add_argument("--audio", action=argparse.BooleanOptionalAction, default=True,
                        help="reserve the audio models' host memory, as a server with AudioService does (default on)")
    add_flags(parser, EngineConfig)
    parser.set_defaults(handler=_plan)


def _plan(args: argparse.Namespace) -> int:
    from arbi_grpc.audio.memory import estimated_audio_component
    from arbi_grpc.memory.estimate import estimate_budget
    from arbi_grpc.memory.kv_pool_default import plan_default_kv_pool
    from arbi_grpc.memory.limits import memory_limit
    from arbi_grpc.memory.model_source import read_model_source, reference_model_source
    from arbi_grpc.parallel.shard_plan import per_rank_model_config

    config = resolve(EngineConfig, args)
    if config.kv_cache_dtype == "tkv":
        raise NotImplementedError(
            "plan --kv-cache-dtype tkv: the TKV pool is sized from the calibration bundle's bits, which plan does "
            "not read (the bundle is checked against the model's weights); a boot logs the measured budget"
        )
    source = reference_model_source(args.shape) if args.shape else read_model_source(config.model)
    world_size = config.tensor_parallel_size
    model = per_rank_model_config(source.config, world_size)  # one rank's heads, KV heads and MLP under TP
    limit = memory_limit(config)
    audio = estimated_audio_component() if args.audio else None
    host_components = (audio,) if audio else ()
    kv_pool = plan_default_kv_pool(config, model, limit, host_components=host_components)
    budget = estimate_budget(config, model, kv_pool, limit, host_components)
    if args.json:
        print(json.dumps({"model": source.name, "read_from": source.read_from,
                          "max_model_len": kv_pool.max_model_len, **budget.as_dict()}, indent=2))
    else:
        whole = source.config
        print(f"{source.name}: {whole.architecture}, {whole.num_layers} layers, hidden {whole.hidden_size}, "
              f"{whole.num_heads}/{whole.num_kv_heads} heads x {whole.head_dim}, vocab {whole.vocab_size} "
              f"(read from {source.read_from})" + (f"; the budget of one of {world_size} tensor-parallel ranks"
                                                   if world_size > 1 else ""))
        rows = [(c.name, f"{c.num_bytes / MIB:,.1f}", c.detail) for c in budget.components]
        rows.append(("total", f"{budget.total_bytes / MIB:,.1f}",
                     f"limit {budget.limit_bytes / MIB:,.1f} MiB ({budget.limit.source})"))
        print_table(("COMPONENT", "MIB", "DETAIL"), rows)
    budget.check_fits()
    return 0
