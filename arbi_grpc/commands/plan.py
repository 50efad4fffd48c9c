"""`arbi-serve plan --model M [--model N ...] --max-context N [--device cuda]`: the memory budget a `serve` with
the same flags would need, estimated from the models' config.json or GGUF metadata alone (no weights are read,
torch is not needed; a directory holding only config.json is enough), or from a real model's shape by name
(`--shape`). Several chat models (repeated --model, or --models-file) and --embedding-models are planned as a
boot loads them: each chat model's budget holds the models resident before it. Exit status 2, with the boot's
message, when it would not fit.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from arbi_grpc.commands.table import print_table
from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.config_flags import add_flags, resolve
from arbi_grpc.errors import InvalidArgumentError
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
    parser.add_argument("--embedding-models", default="", metavar="SPECS",
                        help="comma-separated embedding models resident beside the chat models, as serve's flag")
    add_flags(parser, EngineConfig)
    parser.set_defaults(handler=_plan)


def _plan(args: argparse.Namespace) -> int:
    from arbi_grpc.audio.memory import estimated_audio_component
    from arbi_grpc.embeddings.memory import estimated_embedding_component
    from arbi_grpc.embeddings.specs import resolve_embedding_spec
    from arbi_grpc.memory.limits import memory_limit
    from arbi_grpc.memory.residents import pending_model_component
    from arbi_grpc.model_specs import served_model_configs

    config = resolve(EngineConfig, args)
    if config.kv_cache_dtype == "tkv":
        raise NotImplementedError(
            "plan --kv-cache-dtype tkv: the TKV pool is sized from the calibration bundle's bits, which plan does "
            "not read (the bundle is checked against the model's weights); a boot logs the measured budget"
        )
    model_configs = served_model_configs(config)
    if args.shape and len(model_configs) > 1:
        raise InvalidArgumentError("shape", "estimates one model's shape; give one --model with it")
    limit = memory_limit(config)
    audio = estimated_audio_component() if args.audio else None
    host_components = (audio,) if audio else ()
    # As a boot: the embedding models register first, then the chat models load in order, each one's budget
    # holding what is resident before it.
    residents = tuple(estimated_embedding_component(*resolve_embedding_spec(spec.strip()))
                      for spec in args.embedding_models.split(",") if spec.strip())
    sources = [_source(model_config, args.shape) for model_config in model_configs]
    pending = [pending_model_component(name, model_config, _rank_model(model_config, source), limit, host_components)
               for model_config, (name, source) in zip(model_configs, sources, strict=True)]
    plans = []
    for index, (model_config, (name, source)) in enumerate(zip(model_configs, sources, strict=True)):
        plan = _plan_model(model_config, name, source, limit, host_components, residents, tuple(pending[index + 1:]))
        plans.append(plan)
        residents += (plan.component,)
    if args.json:
        first = plans[0]
        print(json.dumps({**first.as_json(), "models": [plan.as_json() for plan in plans],
                          "embedding_models": {c.name: {"bytes": c.num_bytes, "detail": c.detail}
                                               for c in residents[:len(residents) - len(plans)]},
                          "server_total_bytes": sum(c.num_bytes for c in (*residents, *host_components))}, indent=2))
    else:
        for plan in plans:
            plan.print()
        if len(residents) > 1:
            total = sum(c.num_bytes for c in (*residents, *host_components))
            rows = [(c.name, f"{c.num_bytes / MIB:,.1f}", c.detail) for c in (*residents, *host_components)]
            rows.append(("total", f"{total / MIB:,.1f}", f"limit {limit.num_bytes / MIB:,.1f} MiB ({limit.source})"))
            print("server (every resident model):")
            print_table(("COMPONENT", "MIB", "DETAIL"), rows)
    for plan in plans:
        plan.budget.check_fits()
    return 0


@dataclass(frozen=True)
class _ModelPlan:
    """One chat model's estimate: its name, config source, budget (the residents before it included) and its
    own bytes as one component for the models after it."""

    name: str
    source: Any
    max_model_len: int
    max_running_requests: int
    running_source: str
    budget: Any
    component: Any
    world_size: int

    def as_json(self) -> dict:
        return {"model": self.name, "read_from": self.source.read_from, "max_model_len": self.max_model_len,
                "max_running_requests": self.max_running_requests,
                "max_running_requests_source": self.running_source, **self.budget.as_dict()}

    def print(self) -> None:
        model, budget = self.source.config, self.budget
        print(f"{self.name}: {model.architecture}, {model.num_layers} layers, hidden {model.hidden_size}, "
              f"{model.num_heads}/{model.num_kv_heads} heads x {model.head_dim}, vocab {model.vocab_size} "
              f"(read from {self.source.read_from})" + (f"; the budget of one of {self.world_size} tensor-parallel "
                                                        "ranks" if self.world_size > 1 else ""))
        print(f"context {self.max_model_len} tokens; at most {self.max_running_requests} running requests "
              f"({self.running_source})")
        rows = [(c.name, f"{c.num_bytes / MIB:,.1f}", c.detail) for c in budget.components]
        rows.append(("total", f"{budget.total_bytes / MIB:,.1f}",
                     f"limit {budget.limit_bytes / MIB:,.1f} MiB ({budget.limit.source})"))
        print_table(("COMPONENT", "MIB", "DETAIL"), rows)


def _source(config: EngineConfig, shape: str | None) -> tuple[str, Any]:
    """The served name and the model source (config, where it was read from) of one --model."""
    from arbi_grpc.memory.model_source import read_model_source, reference_model_source
    from arbi_grpc.model_specs import parse_model_spec

    requested = parse_model_spec(config.model)
    source = reference_model_source(shape) if shape else read_model_source(requested.spec)
    return requested.name or source.name, source


def _plan_model(config: EngineConfig, name: str, source: Any, limit, host_components, residents,
                pending) -> _ModelPlan:
    from arbi_grpc.memory.estimate import estimate_budget
    from arbi_grpc.memory.kv_pool_default import plan_default_kv_pool
    from arbi_grpc.memory.residents import chat_model_component, with_residents

    subject = f"model {name!r}"
    model = _rank_model(config, source)
    kv_pool = plan_default_kv_pool(config, model, limit, host_components=host_components,
                                   residents=residents, pending=pending, subject=subject)
    own = estimate_budget(config.with_running_requests(kv_pool.max_running_requests), model, kv_pool, limit,
                          host_components)
    component = chat_model_component(name, own, tuple(c.name for c in host_components))
    return _ModelPlan(name, source, kv_pool.max_model_len, kv_pool.max_running_requests, kv_pool.running_source,
                      with_residents(own, subject, residents), component, config.tensor_parallel_size)


def _rank_model(config: EngineConfig, source: Any) -> Any:
    """One rank's heads, KV heads and MLP under tensor parallelism (the whole model at one rank)."""
    from arbi_grpc.parallel.shard_plan import per_rank_model_config

    return per_rank_model_config(source.config, config.tensor_parallel_size)
