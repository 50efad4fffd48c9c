"""Assembles a ready-to-serve engine from an EngineConfig: resolve and load the model, size the paged KV
cache, check the memory budget, and wire scheduler, model runner, tokenizer, output processing and metrics.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import torch

from arbi_grpc.attention.backend import AttentionBackend
from arbi_grpc.attention.kv_storage import KVStorage
from arbi_grpc.attention.selection import TORCH_DTYPES, build_kv_cache, select_attention_backend
from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.engine.block_manager import BlockManager
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.input_processor import InputProcessor
from arbi_grpc.engine.model_runner import ModelRunner
from arbi_grpc.engine.output_processor import OutputProcessor
from arbi_grpc.engine.prefix_cache import PrefixCache
from arbi_grpc.engine.scheduler import Scheduler
from arbi_grpc.kv_codec.calibration.engine_bundle import load_engine_calibration
from arbi_grpc.memory.budget import MemoryBudget, MemoryComponent
from arbi_grpc.memory.estimate import estimate_budget, parameter_count
from arbi_grpc.memory.kv_pool_default import plan_default_kv_pool
from arbi_grpc.memory.limits import memory_limit
from arbi_grpc.memory.measure import measure_budget, reserved_growth, tensor_bytes
from arbi_grpc.models.checkpoint_reader import read_hf_config
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.quantized_layout import with_stored_quantization
from arbi_grpc.models.decoder import CausalLM
from arbi_grpc.models.loader import load_model
from arbi_grpc.models.model_cache import resolve_model
from arbi_grpc.observability.engine_metrics import EngineMetricsObserver
from arbi_grpc.observability.engine_observer import EngineObserver
from arbi_grpc.observability.metrics import ModelMetrics
from arbi_grpc.text.tokenizer import TextTokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServedModel:
    """Everything the servicers need: the running engine and what it serves."""

    name: str
    model_config: ModelConfig
    engine: Engine
    inputs: InputProcessor
    max_model_len: int
    config: EngineConfig
    parameter_count: int
    weight_bytes: int
    kv_block_bytes: int  # one block over all layers, keys and values (state per first block or batch slot is apart)
    memory_budget: MemoryBudget  # measured at boot
    metrics: ModelMetrics


def build_served_model(config: EngineConfig, host_components: tuple[MemoryComponent, ...] = ()) -> ServedModel:
    """Checks the memory budget, loads the model and starts its engine thread. `host_components` are what else
    the server keeps in host memory (the audio models), counted in a CPU engine's budget.

    The budget is checked twice, failing with ResourceExhaustedError that names the component: estimated
    from config.json before anything is loaded, then measured once the weights and KV pool are allocated
    and the largest step has been profiled.
    """
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    limit = memory_limit(config)  # read before this process allocates anything
    resolved = resolve_model(config.model)
    declared = with_stored_quantization(  # config.json and the quantized file's header, no weights
        ModelConfig.from_hf_config(read_hf_config(resolved.directory)), resolved.directory)
    tkv_calibration = load_engine_calibration(config, resolved.directory)  # None unless --kv-cache-dtype tkv
    kv_pool = plan_default_kv_pool(config, declared, limit, tkv_calibration, host_components)
    estimate_budget(config, declared, kv_pool, limit, host_components).check_fits()
    dtype = TORCH_DTYPES[config.dtype]
    device = torch.device(config.device)
    backend = select_attention_backend(config)
    model, model_config = load_model(resolved.directory, dtype=dtype, device=device, attention_backend=backend,
                                     keep_quantized=config.cpu_weights == "int4")
    tokenizer = TextTokenizer.from_model_dir(resolved.directory)
    num_blocks, bytes_per_block, max_model_len = kv_pool.num_blocks, kv_pool.bytes_per_block, kv_pool.max_model_len
    kv_cache = build_kv_cache(config, model_config, num_blocks, tkv_calibration)
    runner, graph_bytes = build_runner(model, kv_cache, config, max_model_len, backend)
    budget = measure_budget(model, kv_cache, config, kv_pool, limit, cuda_graph_bytes=graph_bytes,
                            host_components=host_components)
    budget.check_fits()
    metrics = ModelMetrics()
    engine = assemble_engine(runner, model_config, tokenizer, config, max_model_len, EngineMetricsObserver(metrics))
    metrics.watch(engine, budget, {"model": resolved.name, "architecture": model_config.architecture,
                                   "dtype": config.dtype, "device": config.device}, config.enable_prefix_cache)
    engine.start()
    log.info(
        "boot: serving %s with context %d tokens; config %s; memory budget %s", resolved.name, max_model_len,
        " ".join(f"{name}={value}" for name, value in asdict(config).items()), budget.summary(),
        extra={"event": "boot", "model": resolved.name, "config": asdict(config),
               "memory_budget": budget.as_dict()},
    )
    return ServedModel(
        name=resolved.name,
        model_config=model_config,
        engine=engine,
        inputs=InputProcessor(tokenizer, model_config.vocab_size, max_model_len),
        max_model_len=max_model_len,
        config=config,
        parameter_count=parameter_count(model_config),  # the quantized weights are no parameters
        weight_bytes=tensor_bytes([*model.parameters(), *model.buffers()]),  # quantized weights are buffers
        kv_block_bytes=bytes_per_block,
        memory_budget=budget,
        metrics=metrics,
    )


def build_runner(
    model: CausalLM,
    kv_cache: KVStorage,
    config: EngineConfig,
    max_model_len: int,
    backend: AttentionBackend,
) -> tuple[ModelRunner, int]:
    """The model runner, with its decode steps captured as CUDA graphs when on CUDA and the backend allows;
    returns it and the bytes the capture kept reserved (0 without graphs). Capture before profiling memory:
    a capture empties the allocator's cache."""
    runner = ModelRunner(model, kv_cache, config.block_size, kv_cache.device)
    graph_batch = config.cuda_graph_batch
    if kv_cache.device.type != "cuda" or graph_batch == 0 or not backend.cuda_graph_safe:
        return runner, 0
    graph_bytes = reserved_growth(lambda: runner.capture_decode_graphs(graph_batch, max_model_len), kv_cache.device)
    log.info("captured CUDA graphs of decode steps up to batch %d (%.1f MiB)", graph_batch, graph_bytes / MIB)
    return runner, graph_bytes


def assemble_engine(
    runner: ModelRunner,
    model_config: ModelConfig,
    tokenizer: TextTokenizer,
    config: EngineConfig,
    max_model_len: int,
    observer: EngineObserver | None = None,
) -> Engine:
    """Wires scheduler and output processing around a model runner; the engine thread is not started."""
    eos_token_ids = frozenset(tokenizer.eos_token_ids) | frozenset(model_config.eos_token_ids)
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
    )
