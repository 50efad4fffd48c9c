"""Measures the activation peak of the engine's largest step: the bytes allocated during one step of
`max_step_tokens` tokens, at their highest point.

The step is the runner's worst: fresh prompts filling the token budget, logits for every row (as when all
of them ask for prompt log-probabilities), those log-probabilities, and the sampler's heaviest path (penalties,
top-k, top-p, min-p, 20 top log-probabilities) over as many rows as the batch may sample.

On the CPU a dispatch mode sees every tensor an operator returns; a storage counts from the op that created it
until it is freed; scratch memory kernels allocate internally, and allocator overhead, are not seen. On CUDA the
caching allocator's own peak counts (`max_memory_allocated` over the step, less what was allocated before it),
which includes kernels' scratch allocations and the allocator's rounding; the step runs once beforehand so that
one-time allocations (cuBLAS workspaces, kernel autotuning) are not taken for activations.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from arbi_grpc.attention.kv_storage import KVStorage
from arbi_grpc.attention.metadata import AttentionMetadata, token_positions
from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.engine.sampler import Sampler, SamplingState, prompt_logprobs
from arbi_grpc.engine.sampling_params import MAX_LOGPROBS_COUNT, SamplingParams, StoppingParams
from arbi_grpc.memory.heap_release import release_free_heap
from arbi_grpc.memory.profile_step import ProfileStep
from arbi_grpc.models.decoder import CausalLM

# The sampler's most expensive settings: every filter and penalty on, the most top log-probabilities.
_HEAVIEST_SAMPLING = SamplingParams(
    temperature=0.8, top_p=0.9, top_k=50, min_p=0.05, repetition_penalty=1.1, presence_penalty=0.1,
    frequency_penalty=0.1, logprobs_count=MAX_LOGPROBS_COUNT, prompt_logprobs=True,
)


class LiveTensorPeak(TorchDispatchMode):
    """Tracks the bytes of storages created by operators under this mode, and their peak.

    An output whose storage is one of the op's inputs (a view, an in-place op) is not new memory.
    """

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, int] = {}  # storage address -> bytes
        self.live_bytes = 0
        self.peak_bytes = 0

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Nothing under this mode is compiled. Left True, torch wraps `__torch_dispatch__` in
        # `torch._disable_dynamo`, whose first call imports torch._dynamo (with sympy and triton: ~140 MiB resident
        # for the server's life).
        return False

    def _released(self, address: int) -> None:
        self.live_bytes -= self._live.pop(address, 0)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        output = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)
        }
        for tensor in tree_flatten(output)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            address, size = storage.data_ptr(), storage.nbytes()
            if size == 0 or address in inputs or address in self._live:
                continue
            self._live[address] = size
            self.live_bytes += size
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
            weakref.finalize(storage, self._released, address)
        return output


def measure_activation_peak(model: CausalLM, kv_cache: KVStorage, step: ProfileStep) -> int:
    """Runs `step` and returns its peak of activation bytes; the KV cache is zeroed afterwards."""
    device = kv_cache.device
    if device.type == "cuda":
        peak = _cuda_allocator_peak(model, kv_cache, step)
    elif device.type == "cpu":
        tracker = LiveTensorPeak()
        with torch.inference_mode(), tracker:
            _run_step(model, kv_cache, step)
        peak = tracker.peak_bytes
    else:
        raise NotImplementedError(f"profiling activations on {device}: only cpu and cuda are profiled")
    # The pool starts zeroed; the profile wrote into its first blocks. A plain CPU pool zeroes only those again: the
    # rest were never touched, and writing them would make the whole pool resident memory (`PagedKVCache`).
    plain_cpu_pool = device.type == "cpu" and isinstance(kv_cache, PagedKVCache)
    written = slice(0, max(_blocks_of(step, kv_cache.block_size))) if plain_cpu_pool else slice(None)
    for tensor in (*kv_cache.key_caches, *kv_cache.value_caches):
        tensor[written].zero_()
    if device.type == "cpu":
        release_free_heap()  # the step's activations, freed, would otherwise stay resident in malloc's arenas
    return peak


def _blocks_of(step: ProfileStep, block_size: int) -> list[int]:
    return [-(-length // block_size) for length in step.prompt_lengths]


def _cuda_allocator_peak(model: CausalLM, kv_cache: KVStorage, step: ProfileStep) -> int:
    device = kv_cache.device
    with torch.inference_mode():
        _run_step(model, kv_cache, step)  # warm-up: library workspaces, Triton compilation and autotuning
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        allocated_before = torch.cuda.memory_allocated(device)
        _run_step(model, kv_cache, step)
        torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - allocated_before


def _run_step(model: CausalLM, kv_cache: KVStorage, step: ProfileStep) -> None:
    device = kv_cache.device
    block_size = kv_cache.block_size
    # Consecutive block ids from block 0 for every sequence, wrapping around the pool: the profile needs valid
    # slots, not private ones, and a first block that may start a sequence (`KVStorage.num_first_blocks`).
    tables = [[i % kv_cache.num_blocks for i in range(-(-length // block_size))] for length in step.prompt_lengths]
    # Batch slots wrap around a storage's the same way: the profile may hold more prompts than sequences can run at
    # once, and fresh prompts never read a slot's state.
    num_slots = len(tables) if kv_cache.num_batch_slots is None else kv_cache.num_batch_slots
    metadata = AttentionMetadata.build(
        query_lens=step.prompt_lengths, seq_lens=step.prompt_lengths, block_tables=tables,
        block_size=block_size, device=device, batch_slots=[i % num_slots for i in range(len(tables))],
    )
    input_ids = torch.zeros(step.num_tokens, dtype=torch.int64, device=device)
    positions = token_positions(metadata.query_lens_host, metadata.seq_lens_host, device)
    hidden = model(input_ids, positions, metadata, kv_cache)
    logits = model.compute_logits(hidden[torch.arange(step.num_tokens, device=device)])  # [T, V] float32
    first_row = 0
    for length in step.prompt_lengths:
        prompt_logprobs(logits[first_row: first_row + length - 1], [0] * length)
        first_row += length
    states = [
        SamplingState(_HEAVIEST_SAMPLING, StoppingParams(max_output_tokens=1), (0,), frozenset())
        for _ in range(step.num_sampled_rows)
    ]
    Sampler(unseeded_seed=0).sample(logits[: step.num_sampled_rows], states)

