"""Assembles a ready-to-serve engine from an EngineConfig: resolve and load the model, size the paged KV
cache, check the memory budget (with what the server already holds, `Placement`), and wire scheduler, model
runner, tokenizer, output processing and metrics. With --tensor-parallel-size N > 1 this process is rank 0: it
spawns the other ranks (`parallel.launch`), holds its own shard, and sizes and checks the KV pool and memory
budget per rank.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

import torch

from arbi_grpc.attention.backend import AttentionBackend
from arbi_grpc.attention.kv_storage import KVStorage
from arbi_grpc.attention.selection import TORCH_DTYPES, build_kv_cache, select_attention_backend
from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.embeddings.decoder_embedder import DecoderEmbedder, DecoderEmbeddingModel, decoder_pooling
from arbi_grpc.engine.block_manager import BlockManager
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.grammars_on_demand import GrammarsOnDemand, TokenMasksOnDemand
from arbi_grpc.engine.input_processor import InputProcessor
from arbi_grpc.engine.model_runner import ModelRunner
from arbi_grpc.engine.output_processor import OutputProcessor
from arbi_grpc.engine.prefix_cache import PrefixCache
from arbi_grpc.engine.scheduler import Scheduler
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec.calibration.engine_bundle import load_engine_calibration
from arbi_grpc.memory.budget import MemoryBudget, MemoryComponent, MemoryLimit
from arbi_grpc.memory.estimate import estimate_budget, parameter_count
from arbi_grpc.memory.kv_pool_default import plan_default_kv_pool
from arbi_grpc.memory.limits import memory_limit
from arbi_grpc.memory.measure import measure_budget, reserved_growth, tensor_bytes
from arbi_grpc.memory.residents import pending_model_component, with_residents
from arbi_grpc.model_specs import parse_model_spec
from arbi_grpc.models.checkpoint_reader import read_hf_config
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.decoder import CausalLM
from arbi_grpc.models.loader import load_model
from arbi_grpc.models.model_cache import default_cache_root, resolve_model
from arbi_grpc.models.quantized_layout import cpu_weight_form, with_stored_quantization
from arbi_grpc.observability.engine_metrics import EngineMetricsObserver
from arbi_grpc.observability.engine_observer import EngineObserver
from arbi_grpc.observability.metrics import ModelMetrics
from arbi_grpc.parallel.group import SINGLE_RANK
from arbi_grpc.parallel.launch import WorkerRanks
from arbi_grpc.parallel.shard_plan import per_rank_model_config
from arbi_grpc.parallel.threads import release_openmp_workers, set_rank_threads
from arbi_grpc.text.tokenizer import TextTokenizer

if TYPE_CHECKING:
    from arbi_grpc.engine.grammar.compiler import ConstraintCompiler

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    """What a model loads beside: the components the server already holds (other models, counted ahead of its
    own), the host components every budget lists (the audio models, on a CPU engine), the server's memory limit
    (None: read now, before anything is allocated) and the estimated components (all but their KV pools) of the
    chat models still to load after it, which a default KV pool leaves room for and splits with
    (`kv_pool_default.py`)."""

    residents: tuple[MemoryComponent, ...] = ()
    host_components: tuple[MemoryComponent, ...] = ()
    limit: MemoryLimit | None = None
    pending: tuple[MemoryComponent, ...] = ()

    @property
    def resident_bytes(self) -> int:
        return sum(component.num_bytes for component in self.residents)


@dataclass(frozen=True)
class ServedModel:
    """Everything the servicers need: the running engine and what it serves."""

    name: str
    model_config: ModelConfig
    engine: Engine
    inputs: InputProcessor
    max_model_len: int
    config: EngineConfig  # as loaded: max_running_requests resolved
    parameter_count: int
    weight_bytes: int
    kv_block_bytes: int  # one block over all layers, keys and values (state per first block or batch slot is apart)
    running_requests_source: str  # how config.max_running_requests (the batch slots) was chosen at load
    memory_budget: MemoryBudget  # its own components, measured at its load (the other residents are apart)
    metrics: ModelMetrics
    embedder: DecoderEmbedder  # its Embed requests, run on its engine thread


def build_served_model(config: EngineConfig, placement: Placement = Placement()) -> ServedModel:
    """Checks the memory budget, loads the model and starts its engine thread. `config.model` is SPEC or
    NAME=SPEC (served under NAME; else under the model's own name).

    The budget is checked twice, failing with ResourceExhaustedError that names the model and the component:
    estimated from config.json before anything is loaded, then measured once the weights and KV pool are
    allocated and the largest step has been profiled; both times with `placement.residents` ahead of the
    model's own components. Under tensor parallelism both are rank 0's: its shard and its KV pool (of its KV
    heads; every rank holds as many blocks).
    """
    world_size = config.tensor_parallel_size
    limit = placement.limit or memory_limit(config)  # read before this process allocates anything
    requested = parse_model_spec(config.model)
    resolved = resolve_model(requested.spec)
    name = requested.name or resolved.name
    host_components = placement.host_components
    declared = with_stored_quantization(  # config.json and the quantized file's header, no weights
        ModelConfig.from_hf_config(read_hf_config(resolved.directory)), resolved.directory)
    rank_declared = per_rank_model_config(declared, world_size)  # refuses shapes that do not split
    config = replace(config, cpu_weights=cpu_weight_form(config.cpu_weights, config.device, world_size, declared))
    if config.cpu_activations == "int8" and config.cpu_weights != "int4":
        raise InvalidArgumentError(
            "cpu_activations", f"int8 multiplies block-quantized matrices, and {name!r} is served with "
                               f"--cpu-weights {config.cpu_weights} (int4 needs a GGUF import with Q4_0/Q4_1/Q8_0 "
                               "matrices and a C++ compiler)")
    set_rank_threads(config, world_size)
    tkv_calibration = load_engine_calibration(config, resolved.directory)  # None unless --kv-cache-dtype tkv
    subject = f"model {name!r}"
    kv_pool = plan_default_kv_pool(config, rank_declared, limit, tkv_calibration, host_components,
                                   placement.residents, placement.pending, subject)
    config = config.with_running_requests(kv_pool.max_running_requests)  # resolves auto (0)
    with_residents(estimate_budget(config, rank_declared, kv_pool, limit, host_components), subject,
                   placement.residents).check_fits()
    dtype = TORCH_DTYPES[config.dtype]
    device = torch.device(config.device)
    backend = select_attention_backend(config)
    num_blocks, bytes_per_block, max_model_len = kv_pool.num_blocks, kv_pool.bytes_per_block, kv_pool.max_model_len
    ranks, group = (None, SINGLE_RANK) if world_size == 1 else WorkerRanks.start(config, resolved.directory,
                                                                                 num_blocks, max_model_len)
    try:
        model, model_config = load_model(resolved.directory, dtype=dtype, device=device, attention_backend=backend,
                                         tensor_parallel=group, keep_quantized=config.cpu_weights == "int4",
                                         quantize_int8=config.cpu_weights == "int8",
                                         int8_activations=config.cpu_activations == "int8")
        tokenizer = TextTokenizer.from_model_dir(resolved.directory)
        kv_cache = build_kv_cache(config, per_rank_model_config(model_config, world_size), num_blocks,
                                  tkv_calibration)
        if ranks is not None:
            ranks.wait_ready()
        runner, graph_bytes = build_runner(model, kv_cache, config, max_model_len, backend, ranks)
        budget = measure_budget(model, kv_cache, config, kv_pool, limit, cuda_graph_bytes=graph_bytes,
                                host_components=host_components, resident_bytes=placement.resident_bytes)
        with_residents(budget, subject, placement.residents).check_fits()
    except BaseException:
        if ranks is not None:
            ranks.close()
        raise
    metrics = ModelMetrics()
    grammars = GrammarsOnDemand(lambda: build_constraint_compiler(tokenizer, model_config, config, metrics))
    engine = assemble_engine(runner, model_config, tokenizer, config, max_model_len, EngineMetricsObserver(metrics),
                             grammars)
    if ranks is not None:
        ranks.watch(engine)
    metrics.watch(engine, budget, {"model": name, "architecture": model_config.architecture,
                                   "dtype": config.dtype, "device": config.device}, config.enable_prefix_cache)
    release_openmp_workers()  # the engine thread's team is the only one to run the steps
    engine.start()
    log.info(
        "boot: serving %s with context %d tokens, at most %d running requests (%s); config %s; memory budget %s",
        name, max_model_len, config.max_running_requests, kv_pool.running_source,
        " ".join(f"{key}={value}" for key, value in asdict(config).items()), budget.summary(),
        extra={"event": "boot", "model": name, "config": asdict(config),
               "max_running_requests_source": kv_pool.running_source, "memory_budget": budget.as_dict()},
    )
    embeddings = DecoderEmbeddingModel(
        name, tokenizer, model_config.vocab_size, max_model_len, model_config.hidden_size,
        decoder_pooling(config.embedding_pooling, config.embedding_normalize, resolved.directory))
    return ServedModel(
        name=name,
        model_config=model_config,
        engine=engine,
        inputs=InputProcessor(tokenizer, model_config.vocab_size, max_model_len, grammars),
        max_model_len=max_model_len,
        config=config,
        parameter_count=parameter_count(model_config),  # the quantized weights are no parameters
        weight_bytes=tensor_bytes([*model.parameters(), *model.buffers()]),  # quantized weights are buffers
        kv_block_bytes=bytes_per_block,
        running_requests_source=kv_pool.running_source,
        memory_budget=budget,
        metrics=metrics,
        embedder=DecoderEmbedder(embeddings, engine, config.max_step_tokens),
    )


def estimated_model_component(config: EngineConfig, limit: MemoryLimit,
                              host_components: tuple[MemoryComponent, ...] = ()) -> MemoryComponent:
    """A chat model still to load as one component, estimated from its config.json with an empty KV pool (what a
    default pool of an earlier model leaves room for)."""
    requested = parse_model_spec(config.model)
    resolved = resolve_model(requested.spec)
    declared = per_rank_model_config(ModelConfig.from_hf_config(read_hf_config(resolved.directory)),
                                     config.tensor_parallel_size)
    return pending_model_component(requested.name or resolved.name, config, declared, limit, host_components)


def build_runner(
    model: CausalLM,
    kv_cache: KVStorage,
    config: EngineConfig,
    max_model_len: int,
    backend: AttentionBackend,
    ranks: WorkerRanks | None = None,
) -> tuple[ModelRunner, int]:
    """The model runner (rank 0's when `ranks` are the other tensor-parallel ranks); on CUDA its eager step
    shapes warmed up (`ModelRunner.warm_up_eager_steps`) and its decode steps captured as CUDA graphs where the
    backend allows; returns it and the bytes the capture kept reserved (0 without graphs). Capture before profiling
    memory: a capture empties the allocator's cache."""
    runner = ModelRunner(model, kv_cache, config.block_size, kv_cache.device, ranks)
    if kv_cache.device.type != "cuda":
        return runner, 0
    started = time.perf_counter()
    warmed = runner.warm_up_eager_steps(max_model_len)
    log.info("ran %d eager warm-up steps (their kernels compiled) in %.1f s", warmed, time.perf_counter() - started)
    graph_batch = config.cuda_graph_batch
    if graph_batch == 0 or not backend.cuda_graph_safe:
        return runner, 0
    graph_bytes = reserved_growth(lambda: runner.capture_decode_graphs(graph_batch, max_model_len), kv_cache.device)
    log.info("captured CUDA graphs of decode steps up to batch %d (%.1f MiB)", graph_batch, graph_bytes / MIB)
    return runner, graph_bytes


def eos_ids_of(tokenizer: TextTokenizer, model_config: ModelConfig) -> frozenset[int]:
    """The ids that end generation: the tokenizer's EOS and the model config's."""
    return frozenset(tokenizer.eos_token_ids) | frozenset(model_config.eos_token_ids)


def build_constraint_compiler(tokenizer: TextTokenizer, model_config: ModelConfig, config: EngineConfig,
                              metrics: ModelMetrics | None = None) -> ConstraintCompiler:
    """The model's grammar compiler: its vocabulary as wide as the logits, stopping on EOS, its compiled grammars
    cached under the model cache root (`<root>/grammars/<vocabulary fingerprint>/`). Imports xgrammar: a served
    model builds it on its first output constraint (`GrammarsOnDemand`)."""
    from arbi_grpc.engine.grammar.compile_cache import CompileCache
    from arbi_grpc.engine.grammar.compiler import ConstraintCompiler
    from arbi_grpc.engine.grammar.vocabulary import build_vocabulary

    vocabulary = build_vocabulary(tokenizer, model_config.vocab_size, eos_ids_of(tokenizer, model_config))
    cache = CompileCache(vocabulary.info, default_cache_root() / "grammars" / vocabulary.fingerprint)
    if metrics is None:
        return ConstraintCompiler(vocabulary, cache, config.grammar_compile_timeout_ms)
    return ConstraintCompiler(vocabulary, cache, config.grammar_compile_timeout_ms,
                              on_compiled=metrics.grammar_compile_time.observe,
                              on_cache_hit=lambda source: metrics.grammar_cache_hits.labels(source).inc())


def assemble_engine(
    runner: ModelRunner,
    model_config: ModelConfig,
    tokenizer: TextTokenizer,
    config: EngineConfig,
    max_model_len: int,
    observer: EngineObserver | None = None,
    grammars: GrammarsOnDemand | ConstraintCompiler | None = None,
) -> Engine:
    """Wires scheduler and output processing around a model runner (and output constraints, given a grammar
    compiler, or one built on first use); the engine thread is not started."""
    eos_token_ids = eos_ids_of(tokenizer, model_config)
    if grammars is not None:
        runner.token_masks = TokenMasksOnDemand(grammars)
    return Engine(
        scheduler=Scheduler(
            BlockManager(runner.kv_cache.num_blocks, config.block_size,
                         num_first_blocks=runner.kv_cache.num_first_blocks,
                         prefix_cache=PrefixCache(config.block_size) if config.enable_prefix_cache else None),
            config.scheduling_limits,
        ),
        runner=runner,
        tokenizer=tokenizer,
        output_processor=OutputProcessor(eos_token_ids, max_model_len),
        observer=observer,
        overlap_steps=config.overlap_steps,
        grammars=grammars,
    )
