"""Sizes the paged KV cache pool from the config: bytes per block, block count, the TKV sink rows and tail
slots, and the context limit the pool can honour. `plan` and the boot share this, so both size the pool identically.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.errors import InvalidArgumentError, ResourceExhaustedError
from arbi_grpc.models.config import ModelConfig

if TYPE_CHECKING:
    from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration

# Bytes per element of each EngineConfig.dtype and plain (non-TKV) kv_cache_dtype.
ELEMENT_BYTES = {"float32": 4, "bfloat16": 2}

# A TKV pool gives one block in 8 a sink row: at block 16, one fp16 sink row per 128 tokens of capacity.
BLOCKS_PER_SINK_ROW = 8


def num_sink_blocks(num_blocks: int, max_running_requests: int) -> int:
    """How many of a TKV pool's `num_blocks` blocks (the first ones) get a sink row, i.e. may start a sequence:
    one in BLOCKS_PER_SINK_ROW, and at least one more than a full running batch so that it stays startable."""
    return min(num_blocks, max(-(-num_blocks // BLOCKS_PER_SINK_ROW), max_running_requests + 1))


@dataclass(frozen=True)
class KVPoolBudget:
    """The bytes a pool may take and why (`source` names the flag or the rule that chose them)."""

    num_bytes: int
    source: str


@dataclass(frozen=True)
class KVPoolPlan:
    """`num_blocks` blocks of `block_size` tokens, each `bytes_per_block` over all layers, K and V; a TKV pool
    also has `num_sink_blocks` sink rows of `sink_row_bytes` and `num_tail_slots` tail slots (one per running
    sequence) of `tail_slot_bytes` (None and 0 for plain storage). `max_running_requests` is the running batch
    limit the pool was planned for, `running_source` how it was chosen (`running_requests.py`; 0 and "" when the
    plan was made for a limit fixed elsewhere)."""

    num_blocks: int
    block_size: int
    bytes_per_block: int
    max_model_len: int
    num_sink_blocks: int | None = None
    sink_row_bytes: int = 0
    num_tail_slots: int | None = None
    tail_slot_bytes: int = 0
    budget_source: str = ""
    max_running_requests: int = 0
    running_source: str = ""

    @property
    def tail_bytes(self) -> int:
        """Bytes of the tail slots, a fixed part of the pool taken from the budget before blocks are sized."""
        return (self.num_tail_slots or 0) * self.tail_slot_bytes

    @property
    def num_bytes(self) -> int:
        """Bytes of the whole pool: its blocks, sink rows and tail slots."""
        return (self.num_blocks * self.bytes_per_block + (self.num_sink_blocks or 0) * self.sink_row_bytes
                + self.tail_bytes)

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def detail(self) -> str:
        sinks = (f" + {self.num_sink_blocks} sink rows x {self.sink_row_bytes / 1024:.0f} KiB"
                 if self.num_sink_blocks is not None else "")
        tails = (f" + {self.num_tail_slots} tail slots x {self.tail_slot_bytes / 1024:.0f} KiB"
                 if self.num_tail_slots is not None else "")
        running = (f"; {self.max_running_requests} running requests ({self.running_source})"
                   if self.max_running_requests else "")
        return (f"{self.num_blocks} blocks x {self.block_size} tokens x {self.bytes_per_block / 1024:.0f} KiB "
                f"per block{sinks}{tails}; context {self.max_model_len} tokens"
                + (f"; sized by {self.budget_source}" if self.budget_source else "") + running)


def kv_block_bytes(config: EngineConfig, model: ModelConfig, tkv_calibration: TkvCalibration | None = None) -> int:
    """Bytes one block costs over all layers, K and V, in the storage `config.kv_cache_dtype` names; a TKV
    pool's cost follows the calibration's per-layer bits (codes, group scales and zeros; sink rows are apart)."""
    if config.kv_cache_dtype == "tkv":
        from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache  # lazily: the codec imports torch

        return TkvPagedKVCache.bytes_per_block_for(_require_calibration(tkv_calibration), config.block_size)
    element_bytes = ELEMENT_BYTES[config.kv_cache_dtype]
    return 2 * model.num_layers * config.block_size * model.num_kv_heads * model.head_dim * element_bytes


def _require_calibration(tkv_calibration: TkvCalibration | None) -> TkvCalibration:
    if tkv_calibration is None:
        raise InvalidArgumentError("kv_calibration", "sizing a TKV pool needs the calibration bundle (its bits)")
    return tkv_calibration


@dataclass(frozen=True)
class _PoolSizing:
    """What a pool of N blocks costs: N blocks, plus for TKV (`max_running_requests` set) its sink rows and a
    tail slot of `kv_exact_blocks` blocks for each running sequence."""

    bytes_per_block: int
    sink_row_bytes: int
    tail_slot_bytes: int
    max_running_requests: int | None

    @classmethod
    def for_config(
        cls, config: EngineConfig, model: ModelConfig, tkv_calibration: TkvCalibration | None
    ) -> _PoolSizing:
        bytes_per_block = kv_block_bytes(config, model, tkv_calibration)
        if config.kv_cache_dtype != "tkv":
            return cls(bytes_per_block, 0, 0, None)
        from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache  # lazily: the codec imports torch

        if config.running_requests_auto:
            raise ValueError("a TKV pool holds a tail slot per running request: resolve max_running_requests (auto) "
                             "first (running_requests.choose_running_requests)")
        calibration = _require_calibration(tkv_calibration)
        return cls(bytes_per_block, TkvPagedKVCache.sink_row_bytes_for(calibration),
                   TkvPagedKVCache.tail_slot_bytes_for(calibration, config.block_size, config.kv_exact_window_blocks),
                   config.max_running_requests)

    def num_sink_blocks(self, num_blocks: int) -> int | None:
        if self.max_running_requests is None:
            return None
        return num_sink_blocks(num_blocks, self.max_running_requests)

    @property
    def tail_bytes(self) -> int:
        """The tail slots' bytes: fixed, whatever the block count."""
        return (self.max_running_requests or 0) * self.tail_slot_bytes

    def num_bytes(self, num_blocks: int) -> int:
        return (num_blocks * self.bytes_per_block + (self.num_sink_blocks(num_blocks) or 0) * self.sink_row_bytes
                + self.tail_bytes)

    def largest_pool(self, budget_bytes: int) -> int:
        """The most blocks whose pool fits `budget_bytes` (the cost only grows with the block count); 0 when
        not even the tail slots fit."""
        # num_bytes(low) fits (or low is 0); nothing above high does.
        low, high = 0, max(0, budget_bytes - self.tail_bytes) // self.bytes_per_block
        while low < high:
            middle = (low + high + 1) // 2
            if self.num_bytes(middle) <= budget_bytes:
                low = middle
            else:
                high = middle - 1
        return low


def pool_block_count(config: EngineConfig, model: ModelConfig, tkv_calibration: TkvCalibration | None,
                     budget_bytes: int) -> int:
    """The most blocks a pool of `budget_bytes` holds for `config` (its sink rows and, for TKV,
    `config.max_running_requests` tail slots counted); 0 when not even the tail slots fit."""
    return _PoolSizing.for_config(config, model, tkv_calibration).largest_pool(budget_bytes)


def _storage_detail(config: EngineConfig, model: ModelConfig, tkv_calibration: TkvCalibration | None) -> str:
    if config.kv_cache_dtype == "tkv" and tkv_calibration is not None:
        return f"TKV codes of {tkv_calibration.average_bits():.2f} bits on average with group scales and sinks"
    return (f"2 x {model.num_layers} layers x {model.num_kv_heads} KV heads x {model.head_dim} x "
            f"{ELEMENT_BYTES[config.kv_cache_dtype]} bytes per token")


def plan_kv_pool(
    config: EngineConfig, model: ModelConfig, tkv_calibration: TkvCalibration | None = None,
    budget: KVPoolBudget | None = None,
) -> KVPoolPlan:
    """The pool `budget` (default: the explicit `config.kv_cache_memory_mib`) buys for `model` (with
    `tkv_calibration` for a TKV cache); `kv_pool_default.plan_default_kv_pool` chooses the budget when the
    flag is left at 0.

    An auto `max_running_requests` (0) is resolved within the budget (`running_requests.choose_running_requests`);
    the plan carries the limit it was made for, which the storage must be built with
    (`config.with_running_requests(plan.max_running_requests)`).

    The context limit is `max_model_len` when set, else the model's context capped at what the pool holds.
    Raises InvalidArgumentError when max_model_len exceeds the model's context, ResourceExhaustedError
    (naming the KV cache and its numbers) when the pool holds no block or not one max-length sequence.
    """
    if budget is None:
        if not config.kv_cache_memory_mib:
            raise InvalidArgumentError("kv_cache_memory_mib", "0 (sized from the device) needs the memory limit: "
                                                              "use kv_pool_default.plan_default_kv_pool")
        budget = KVPoolBudget(config.kv_cache_memory_bytes, f"kv_cache_memory_mib={config.kv_cache_memory_mib}")
    from arbi_grpc.memory.running_requests import choose_running_requests  # it sizes pools with this module

    fixed = budget
    running = choose_running_requests(config, model, tkv_calibration, lambda candidate: fixed)
    config = config.with_running_requests(running.count)
    sizing = _PoolSizing.for_config(config, model, tkv_calibration)
    num_blocks = sizing.largest_pool(budget.num_bytes)
    if num_blocks < 1:
        tails = (f" beside the tail slots of {sizing.max_running_requests} running sequences "
                 f"({sizing.tail_bytes / MIB:.2f} MiB, --max-running-requests)" if sizing.tail_bytes else "")
        raise ResourceExhaustedError(
            f"memory budget: the KV cache does not fit: {budget.source} ({budget.num_bytes / MIB:,.1f} MiB) holds no "
            f"block; one block of {config.block_size} tokens costs "
            f"{(sizing.num_bytes(1) - sizing.tail_bytes) / MIB:.2f} MiB "
            f"({_storage_detail(config, model, tkv_calibration)}){tails}"
        )
    model_context = model.max_position_embeddings
    if config.max_model_len > model_context:
        raise InvalidArgumentError(
            "max_model_len", f"{config.max_model_len} exceeds the model's context of {model_context} tokens"
        )
    capacity = num_blocks * config.block_size
    if config.max_model_len > capacity:
        needed_blocks = -(-config.max_model_len // config.block_size)
        needed_mib = sizing.num_bytes(needed_blocks) / MIB
        raise ResourceExhaustedError(
            f"memory budget: the KV cache does not fit one sequence of max_model_len={config.max_model_len} "
            f"tokens: it needs {needed_blocks} blocks ({needed_mib:.1f} MiB) but {budget.source} "
            f"({budget.num_bytes / MIB:,.1f} MiB) holds {num_blocks} blocks ({capacity} tokens); raise "
            f"--kv-cache-memory-mib to at least {int(-(-needed_mib // 1))} or lower --max-model-len"
        )
    max_model_len = config.max_model_len or min(model_context, capacity)
    return KVPoolPlan(num_blocks, config.block_size, sizing.bytes_per_block, max_model_len,
                      sizing.num_sink_blocks(num_blocks), sizing.sink_row_bytes,
                      sizing.max_running_requests, sizing.tail_slot_bytes, budget.source, running.count, running.source)
