"""The engine's configuration: `EngineConfig`, one frozen dataclass validated at construction, which includes
`SchedulingLimits`, the one type of the scheduling limits from flag to scheduler (and in the admin API).

Each field carries its help text in `metadata["help"]`; `config_flags` turns the fields into CLI flags and
`ARBI_*` environment overrides, so a new setting is declared here and nowhere else. "auto" settings are
resolved per device before the frozen fields are set (`EngineConfig.__init__`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from arbi_grpc.errors import InvalidArgumentError
from arbi_kernels.limits import MAX_EXACT_WINDOW_TOKENS  # one tile of the TKV tail store kernel

MIB = 1024 * 1024
ATTENTION_BACKENDS = ("auto", "torch", "triton", "flashinfer")
KV_CACHE_DTYPES = ("auto", "float32", "bfloat16", "tkv")
EMBEDDING_POOLINGS = ("auto", "last", "mean")  # a decoder model's (embeddings/decoder_embedder.py)
CPU_WEIGHT_FORMS = ("auto", "float", "int4", "int8")  # auto: models/quantized_layout.cpu_weight_form
CPU_ACTIVATION_FORMS = ("float", "int8")
MAX_KV_EXACT_BLOCKS = 16
DEFAULT_EXACT_WINDOW_TOKENS = 64  # --kv-exact-blocks 0: four blocks of 16
# --max-running-requests 0 (auto, `memory/running_requests.py`): as many sequences of TYPICAL_SEQUENCE_TOKENS as
# the KV pool holds beside their TKV tail slots, never fewer than the floor (the fixed default before) nor more
# than the cap (the default --cuda-graph-max-batch: every decode batch replays a graph) or --max-step-tokens.
AUTO_RUNNING_REQUESTS_FLOOR = 64
AUTO_RUNNING_REQUESTS_CAP = 256
TYPICAL_SEQUENCE_TOKENS = 2048
# --max-step-tokens / --max-prefill-chunk-tokens 0 (auto), per device. On the H200 (Llama-3-8B shape, 64 x (2,048 +
# 512) through the server, 2026-12-02) 512 / 256 starved the GPU: 8192 / 2048 took bf16 from 1,719 to 2,411
# output tok/s and TKV K4V4 from 1,519 to 3,632. The CPU keeps small steps: a step's tokens cost it linearly.
AUTO_STEP_TOKENS = {"cpu": 512, "cuda": 8192}
AUTO_PREFILL_CHUNK_TOKENS = {"cpu": 256, "cuda": 2048}


def setting(default, help: str, repeat: bool = False):  # noqa: A002 (mirrors argparse's name)
    """A config field with its help text; a `repeat` (string) field's flag may be given several times, its
    values joined with ',' (as its environment variable lists them)."""
    return field(default=default, metadata={"help": help, "repeat": repeat})


@dataclass(frozen=True)
class SchedulingLimits:
    """How much the engine takes on per step and in total; the admin API changes them while the server runs
    (from the engine's next step). `check` lists every violation of a set of values, so an update is refused
    whole, naming each bad field."""

    max_running_requests: int = setting(AUTO_RUNNING_REQUESTS_FLOOR, "most sequences in the running batch")
    max_step_tokens: int = setting(
        AUTO_STEP_TOKENS["cpu"], "per-step token budget shared by prefill chunks and decodes"
    )
    max_prefill_chunk_tokens: int = setting(
        AUTO_PREFILL_CHUNK_TOKENS["cpu"], "largest prefill chunk of one request per step while others wait (fairness)"
    )
    max_waiting_requests: int = setting(256, "waiting queue bound; beyond it requests get RESOURCE_EXHAUSTED")
    default_max_output_tokens: int = setting(1024, "output length of requests that set none")

    def __post_init__(self) -> None:
        problems = SchedulingLimits.check({name: getattr(self, name) for name in SchedulingLimits.names()})
        if problems:
            raise InvalidArgumentError(*problems[0])

    @staticmethod
    def names() -> tuple[str, ...]:
        return tuple(limit.name for limit in dataclasses.fields(SchedulingLimits))

    @staticmethod
    def check(values: Mapping[str, int]) -> list[tuple[str, str]]:
        """(field, description) for each unknown name or value out of range; empty when all are fine."""
        known = SchedulingLimits.names()
        problems = []
        for name, value in values.items():
            if name not in known:
                problems.append((name, f"{name!r} is not a runtime setting; known: {', '.join(known)}"))
            elif value <= 0:
                problems.append((name, f"must be > 0, got {value}"))
        return problems


@dataclass(frozen=True)
class _EngineFields(SchedulingLimits):
    """EngineConfig's fields (after the scheduling limits it includes), each holding a resolved value, except
    max_running_requests, whose 0 (auto) the KV pool plan resolves (`with_running_requests`)."""

    max_step_tokens: int = setting(
        0, "per-step token budget shared by prefill chunks and decodes (0 = auto: "
           f"{AUTO_STEP_TOKENS['cpu']} on the CPU, {AUTO_STEP_TOKENS['cuda']} on CUDA)"
    )
    max_prefill_chunk_tokens: int = setting(
        0, "largest prefill chunk of one request per step while others wait (fairness; 0 = auto: "
           f"{AUTO_PREFILL_CHUNK_TOKENS['cpu']} on the CPU, {AUTO_PREFILL_CHUNK_TOKENS['cuda']} on CUDA)"
    )
    max_running_requests: int = setting(
        0, "most sequences in the running batch (0 = auto: as many sequences of "
           f"{TYPICAL_SEQUENCE_TOKENS} tokens, or the context if shorter, as the KV pool holds beside their TKV tail "
           f"slots, within {AUTO_RUNNING_REQUESTS_FLOOR}..{AUTO_RUNNING_REQUESTS_CAP} and --max-step-tokens; "
           f"{AUTO_RUNNING_REQUESTS_FLOOR} on the CPU when the pool is sized by default, since that pool follows it)"
    )

    model: str = setting(
        "SmolLM2-135M-Instruct", "chat model to serve: a name, Hugging Face style directory or .gguf file; NAME=SPEC "
        "serves it under NAME; repeat the flag (',' in the environment) to serve several, the first being the default "
        "for requests that name none", repeat=True,
    )
    models_file: str = setting(
        "", "TOML file of the chat models to serve instead of --model: [[model]] tables with spec, optional name and "
            "per-model settings (docs/operations.md); the first is the default"
    )
    device: str = setting("cpu", "device to run on: cpu or cuda")
    dtype: str = setting(
        "auto", "weights and activations dtype: float32, bfloat16 or auto (float32 on cpu, bfloat16 on cuda)"
    )
    attention_backend: str = setting(
        "auto", "attention implementation: torch (torch's ops; on cpu, decodes over a float32 cache by a C++ "
                "kernel), triton, flashinfer or auto (torch on cpu, triton on cuda)"
    )
    cuda_graph_max_batch: int = setting(
        256, "largest decode batch replayed from a CUDA graph captured at boot (0 = no CUDA graphs)"
    )
    kv_cache_dtype: str = setting(
        "auto", "KV cache storage: auto (the model dtype), bfloat16, float32, or tkv (the calibrated 2-8 bit codec)"
    )
    kv_bits: str = setting(
        "", "TKV bits: one number for keys and values (4), K/V (4/3), or empty to take the calibration bundle's"
    )
    kv_calibration: str = setting(
        "", "TKV calibration bundle directory (from `arbi-serve calibrate`); required with --kv-cache-dtype tkv"
    )
    kv_exact_blocks: int = setting(
        0, "TKV: blocks each query reads exactly (fp16), its own and the ones before it; older ones come from their "
           f"codes. 0 = the blocks of the newest {DEFAULT_EXACT_WINDOW_TOKENS} tokens (4 at --block-size 16); else "
           f"1..{MAX_KV_EXACT_BLOCKS}, at most {MAX_EXACT_WINDOW_TOKENS} tokens with --block-size"
    )
    kv_prefill_exact: str = setting(
        "chunk", "TKV: what a prefill chunk reads exactly. chunk: its own tokens and the window before it, codes only "
                 "for the cached prefix (prefill at about a bf16 cache's speed; a prompt's numbers then depend on where "
                 "its chunks start, so on the load and on prefix-cache hits); window: each query only its own window, "
                 "as a decode step does (numbers independent of chunking, batching and prefix-cache hits)"
    )
    block_size: int = setting(16, "tokens per KV cache block")
    kv_cache_memory_mib: int = setting(
        0, "memory of the KV cache pool in MiB (0 = sized from the device: on the CPU what --max-running-requests "
           "sequences of the context need, within a share of the free memory; on CUDA what the other components "
           "leave under --gpu-memory-utilization)"
    )
    gpu_memory_utilization: float = setting(
        0.9, "CUDA: fraction of the device memory the server may fill when the KV pool is sized by default"
    )
    max_model_len: int = setting(0, "longest sequence served, prompt plus output (0 = the model's context)")
    enable_prefix_cache: bool = setting(True, "reuse the KV blocks of cached prompt prefixes")
    overlap_steps: bool = setting(
        True, "launch each engine step before reading the previous one's tokens, so the device never waits "
              "for the host's bookkeeping (outputs are the same either way)"
    )
    grammar_compile_timeout_ms: int = setting(
        10000, "longest an output constraint's grammar may take to compile; a request whose grammar takes longer "
               "fails RESOURCE_EXHAUSTED (the compile still finishes and is cached)"
    )
    embedding_pooling: str = setting(
        "auto", "how this chat model's Embed vectors pool its final hidden states (after the final norm): last (the "
                "last token's), mean (over the input's tokens), or auto (what a sentence-transformers checkpoint "
                "declares in modules.json, pooling and normalization; else last)"
    )
    embedding_normalize: bool = setting(
        True, "L2-normalize this chat model's Embed vectors unless its checkpoint declares otherwise under "
              "--embedding-pooling auto (a request's `normalize` overrides both)"
    )
    torch_threads: int = setting(
        0, "CPU threads used by torch in each rank (0 = torch's default; under tensor parallelism on the CPU, the "
           "cores shared evenly among the ranks)"
    )
    tensor_parallel_size: int = setting(
        1, "ranks the model is split across (tensor parallelism over torch.distributed: gloo on cpu, NCCL on cuda, "
           "one GPU per rank); the server spawns ranks 1..N-1 itself. Heads, KV heads, intermediate size and "
           "vocabulary must divide by it"
    )
    cpu_weights: str = setting(
        "auto", "on the CPU, the layers' matrices: auto (int4 for a GGUF import with Q4_0/Q4_1/Q8_0 matrices when a "
                "C++ compiler is found, else float), float (a GGUF import's matrices dequantized to float32), int4 "
                "(a GGUF import's kept as stored and run by arbi-serve's C++ kernel in float32: logits within 1e-4 "
                "nats of the dequantized model's, a quarter of its memory) or int8 (any float checkpoint's "
                "quantized at load to per-row int8 and run by torch's int8 kernel: wikitext-2 perplexity within "
                "0.5%, greedy choices flip at near-ties) (docs/cpu_weights.md)"
    )
    cpu_activations: str = setting(
        "float", "on the CPU with --cpu-weights int4, what the block-quantized matrices multiply: float (float32 "
                 "activations, the exact product above) or int8 (activations quantized to int8 per 32 columns and "
                 "each block multiplied in integers, as llama.cpp does: about 1.8x faster matrices at one row, "
                 "wikitext-2 perplexity +0.5%, greedy answers depart at near-ties) (docs/cpu_weights.md)"
    )
    memory_limit_mib: int = setting(
        0, "memory the weights, KV cache and activations may take in MiB; a boot over it fails "
           "(0 = what the machine offers at boot)"
    )


class EngineConfig(_EngineFields):
    """How the engine loads its model and sizes its KV cache, batches and queues.

    Built from keyword settings (the field names); "auto" in dtype, attention_backend and kv_cache_dtype, and 0 in
    the step and prefill chunk budgets, are resolved for the device first (`resolve_auto_settings`), so the frozen
    fields hold what runs.
    """

    def __init__(self, **settings: Any) -> None:
        super().__init__(**resolve_auto_settings(settings))

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise InvalidArgumentError("block_size", f"must be > 0, got {self.block_size}")
        if self.kv_cache_memory_mib < 0:
            raise InvalidArgumentError("kv_cache_memory_mib", f"must be >= 0 (0 = sized from the device), "
                                                              f"got {self.kv_cache_memory_mib}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise InvalidArgumentError("gpu_memory_utilization", f"must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.max_running_requests < 0:
            raise InvalidArgumentError("max_running_requests", f"must be >= 0 (0 = auto), got {self.max_running_requests}")
        limits = {name: getattr(self, name) for name in SchedulingLimits.names() if name != "max_running_requests"}
        problems = SchedulingLimits.check(limits)
        if problems:
            raise InvalidArgumentError(*problems[0])
        if self.max_model_len < 0:
            raise InvalidArgumentError("max_model_len", f"must be >= 0, got {self.max_model_len}")
        if self.grammar_compile_timeout_ms <= 0:
            raise InvalidArgumentError("grammar_compile_timeout_ms", f"must be > 0, got {self.grammar_compile_timeout_ms}")
        if self.embedding_pooling not in EMBEDDING_POOLINGS:
            raise InvalidArgumentError("embedding_pooling", f"must be one of {', '.join(EMBEDDING_POOLINGS)}, "
                                                            f"got {self.embedding_pooling!r}")
        if self.torch_threads < 0:
            raise InvalidArgumentError("torch_threads", f"must be >= 0, got {self.torch_threads}")
        check_tensor_parallel(self)
        if self.cpu_weights not in CPU_WEIGHT_FORMS:
            raise InvalidArgumentError("cpu_weights",
                                       f"must be 'auto', 'float', 'int4' or 'int8', got {self.cpu_weights!r}")
        if self.cpu_weights == "int8" and (self.device != "cpu" or self.tensor_parallel_size > 1):
            raise InvalidArgumentError(
                "cpu_weights", f"int8 runs on the CPU with one rank (torch's CPU int8 kernel), not on "
                               f"{self.device!r} with tensor_parallel_size {self.tensor_parallel_size}; "
                               "use --cpu-weights float there")
        if self.cpu_weights == "int4" and self.tensor_parallel_size > 1:
            raise NotImplementedError(
                "cpu_weights=int4 with tensor_parallel_size > 1: the quantized blocks are not split across "
                "ranks yet; serve with --cpu-weights float or one rank")
        if self.cpu_activations not in CPU_ACTIVATION_FORMS:
            raise InvalidArgumentError("cpu_activations", f"must be 'float' or 'int8', got {self.cpu_activations!r}")
        if self.cpu_activations == "int8" and (self.device != "cpu" or self.cpu_weights not in ("auto", "int4")
                                               or self.tensor_parallel_size > 1):
            raise InvalidArgumentError(
                "cpu_activations", f"int8 multiplies block-quantized matrices on the CPU with one rank (--cpu-weights "
                                   f"int4 or auto), not --cpu-weights {self.cpu_weights} on {self.device!r} with "
                                   f"tensor_parallel_size {self.tensor_parallel_size}")
        if self.memory_limit_mib < 0:
            raise InvalidArgumentError("memory_limit_mib", f"must be >= 0, got {self.memory_limit_mib}")
        if self.attention_backend in ("triton", "flashinfer") and self.device != "cuda":
            raise InvalidArgumentError(
                "attention_backend", f"{self.attention_backend!r} runs on cuda only; on {self.device!r} use 'torch'"
            )
        if self.cuda_graph_max_batch < 0:
            raise InvalidArgumentError("cuda_graph_max_batch", f"must be >= 0, got {self.cuda_graph_max_batch}")
        if self.kv_cache_dtype not in ("tkv", self.dtype) and self.attention_backend != "torch":
            raise InvalidArgumentError(
                "kv_cache_dtype",
                f"the {self.attention_backend!r} attention kernels read a KV cache in the weights' dtype "
                f"({self.dtype!r}), not {self.kv_cache_dtype!r}; use --kv-cache-dtype auto, or --attention-backend torch",
            )
        if self.kv_prefill_exact not in ("chunk", "window"):
            raise InvalidArgumentError("kv_prefill_exact", f"must be 'chunk' or 'window', got {self.kv_prefill_exact!r}")
        if self.kv_cache_dtype != "tkv":
            for name in ("kv_bits", "kv_calibration"):
                if getattr(self, name):
                    raise InvalidArgumentError(name, f"applies to --kv-cache-dtype tkv only, not {self.kv_cache_dtype!r}")
            if self.kv_exact_blocks:
                raise InvalidArgumentError(
                    "kv_exact_blocks",
                    f"applies to --kv-cache-dtype tkv only (a {self.kv_cache_dtype!r} cache is exact everywhere); "
                    f"got {self.kv_exact_blocks}, leave it at 0",
                )
        elif not self.kv_calibration:
            raise InvalidArgumentError(
                "kv_calibration",
                "--kv-cache-dtype tkv needs a calibration bundle of the served model: create one with "
                f"`arbi-serve calibrate --model {self.model} --output DIR`, then pass --kv-calibration DIR",
            )
        elif self.kv_exact_blocks < 0:
            raise InvalidArgumentError(
                "kv_exact_blocks", f"must be 0 (the blocks of the newest {DEFAULT_EXACT_WINDOW_TOKENS} tokens) or in "
                                   f"[1, {MAX_KV_EXACT_BLOCKS}], got {self.kv_exact_blocks}")
        else:
            check_kv_exact_blocks(self.kv_exact_window_blocks, self.block_size)
        parse_kv_bits(self.kv_bits)

    @property
    def running_requests_auto(self) -> bool:
        """Whether max_running_requests is still 0 (auto), for the KV pool plan to resolve."""
        return self.max_running_requests == 0

    @property
    def max_running_requests_bound(self) -> int:
        """The most sequences the batch may run: max_running_requests, or while it is auto the most it may become."""
        if self.running_requests_auto:
            return min(AUTO_RUNNING_REQUESTS_CAP, self.max_step_tokens)
        return self.max_running_requests

    def with_running_requests(self, count: int) -> EngineConfig:
        """This config with max_running_requests set to `count` (> 0), as the KV pool plan resolves auto."""
        return dataclasses.replace(self, max_running_requests=count)

    @property
    def scheduling_limits(self) -> SchedulingLimits:
        """The scheduling limits alone, as the scheduler and the admin API hold them; max_running_requests must be
        resolved first (`kv_pool_default.plan_default_kv_pool` says how many)."""
        if self.running_requests_auto:
            raise ValueError("max_running_requests is auto (0): resolve it from the KV pool plan first "
                             "(EngineConfig.with_running_requests)")
        return SchedulingLimits(**{name: getattr(self, name) for name in SchedulingLimits.names()})

    @property
    def cuda_graph_batch(self) -> int:
        """The largest decode batch captured as a CUDA graph: none is needed beyond the running batch limit."""
        return min(self.cuda_graph_max_batch, self.max_running_requests_bound)

    @property
    def kv_exact_window_blocks(self) -> int:
        """TKV's exact window in blocks: --kv-exact-blocks, or for 0 the blocks of the newest
        DEFAULT_EXACT_WINDOW_TOKENS tokens (at least one). Greedy SmolLM2 K4V4 on the CPU followed a bfloat16
        cache on 3, 11 and 19 of 20 chat prompts with windows of 1, 2 and 4 blocks of 16 (docs/tkv.md)."""
        return self.kv_exact_blocks or max(1, DEFAULT_EXACT_WINDOW_TOKENS // self.block_size)

    @property
    def kv_bits_pair(self) -> tuple[int, int] | None:
        """--kv-bits as (key_bits, value_bits), None when the bundle's per-layer bits apply."""
        return parse_kv_bits(self.kv_bits)

    @property
    def kv_cache_memory_bytes(self) -> int:
        return self.kv_cache_memory_mib * MIB


def resolve_auto_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """`settings` with "auto" replaced by what the device runs: dtype bfloat16 on cuda, float32 on cpu; the
    triton attention backend on cuda, torch on cpu; a KV cache in the weights' dtype; the step and prefill chunk
    token budgets of the device (0). The values are checked first, so a bad one is refused under its own name."""
    fields = {entry.name: entry for entry in dataclasses.fields(EngineConfig)}
    resolved = {name: settings.get(name, fields[name].default) for name in ("device", "dtype", "attention_backend",
                                                                            "kv_cache_dtype")}
    device = resolved["device"]
    if device not in ("cpu", "cuda"):
        raise InvalidArgumentError("device", f"must be 'cpu' or 'cuda', got {device!r}")
    if resolved["dtype"] not in ("auto", "float32", "bfloat16"):
        raise InvalidArgumentError("dtype", f"must be 'auto', 'float32' or 'bfloat16', got {resolved['dtype']!r}")
    if resolved["attention_backend"] not in ATTENTION_BACKENDS:
        raise InvalidArgumentError("attention_backend", f"must be one of {', '.join(ATTENTION_BACKENDS)}, "
                                                        f"got {resolved['attention_backend']!r}")
    if resolved["kv_cache_dtype"] not in KV_CACHE_DTYPES:
        raise InvalidArgumentError("kv_cache_dtype", f"must be one of {', '.join(KV_CACHE_DTYPES)}, "
                                                     f"got {resolved['kv_cache_dtype']!r}")
    if resolved["dtype"] == "auto":
        resolved["dtype"] = "bfloat16" if device == "cuda" else "float32"
    if resolved["attention_backend"] == "auto":
        resolved["attention_backend"] = "triton" if device == "cuda" else "torch"
    if resolved["kv_cache_dtype"] == "auto":
        resolved["kv_cache_dtype"] = resolved["dtype"]
    for name, by_device in (("max_step_tokens", AUTO_STEP_TOKENS), ("max_prefill_chunk_tokens",
                                                                    AUTO_PREFILL_CHUNK_TOKENS)):
        resolved[name] = settings.get(name, fields[name].default) or by_device[device]
    return {**settings, **resolved}


def check_tensor_parallel(config: EngineConfig) -> None:
    """--tensor-parallel-size: >= 1; above 1, the features whose worker-rank side is not built are refused
    (NotImplementedError naming the flag to change)."""
    size = config.tensor_parallel_size
    if size < 1:
        raise InvalidArgumentError("tensor_parallel_size", f"must be >= 1, got {size}")
    if size == 1:
        return
    if config.kv_cache_dtype == "tkv":
        raise NotImplementedError(
            f"--tensor-parallel-size {size} with --kv-cache-dtype tkv: the calibration bundle is not split by KV "
            "head across ranks yet; use --kv-cache-dtype auto, or --tensor-parallel-size 1"
        )
    if config.device == "cuda" and config.cuda_graph_max_batch > 0:
        raise NotImplementedError(
            f"--tensor-parallel-size {size} with CUDA graphs: the worker ranks run every step eagerly and capture "
            "no graph; pass --cuda-graph-max-batch 0"
        )


def check_kv_exact_blocks(exact_blocks: int, block_size: int) -> None:
    """TKV's exact window: 1..MAX_KV_EXACT_BLOCKS blocks of at most MAX_EXACT_WINDOW_TOKENS tokens together; else
    InvalidArgumentError("kv_exact_blocks", ...)."""
    if not 1 <= exact_blocks <= MAX_KV_EXACT_BLOCKS:
        raise InvalidArgumentError("kv_exact_blocks", f"must be in [1, {MAX_KV_EXACT_BLOCKS}], got {exact_blocks}")
    if exact_blocks * block_size > MAX_EXACT_WINDOW_TOKENS:
        raise InvalidArgumentError(
            "kv_exact_blocks",
            f"{exact_blocks} exact blocks of {block_size} tokens make a window of {exact_blocks * block_size} tokens, "
            f"more than the {MAX_EXACT_WINDOW_TOKENS} the TKV tail store holds in one tile; lower "
            "--kv-exact-blocks or --block-size",
        )


def parse_kv_bits(text: str) -> tuple[int, int] | None:
    """--kv-bits: "4" -> (4, 4), "4/3" -> (key 4, value 3), "" -> None. Bits outside 2..8, or 7, raise
    InvalidArgumentError("kv_bits", ...)."""
    if not text:
        return None
    # Imported here: the codec needs torch, the client CLI does not.
    from arbi_grpc.kv_codec.spec import validate_bits

    parts = text.split("/")
    if len(parts) > 2 or not all(part.strip().isdigit() for part in parts):
        raise InvalidArgumentError(
            "kv_bits", f"expected one number for keys and values (4) or key/value bits (4/3), got {text!r}"
        )
    key_bits, value_bits = (validate_bits(int(part)) for part in (parts * 2)[:2])
    return key_bits, value_bits
