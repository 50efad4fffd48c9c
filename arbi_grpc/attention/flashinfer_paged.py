"""The CUDA attention backend over FlashInfer's paged wrappers: the step's keys/values go into the bf16
`PagedKVCache` with our slot write (arbi_kernels), then FlashInfer attends over the same NHD block tensors the
Triton kernels read: its batch decode wrapper when every sequence brings one token, its batch prefill wrapper
(causal, over each sequence's cached prefix) for any step with a longer chunk.

FlashInfer plans a step on the host (page lists, work split); the plan is made on the first layer's call and
reused by every layer of the step. `flashinfer` is imported only when the backend is built, so the rest of the
engine never needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from arbi_grpc.attention.metadata import AttentionMetadata
from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.engine.host_to_device import to_device_no_sync
from arbi_grpc.errors import InvalidArgumentError, MissingDependencyError

FLASHINFER_WHEEL = "flashinfer-python==0.6.13"
# FlashInfer's recommended split-KV scratch size; one buffer, shared by the decode and prefill wrappers (a step
# runs one of the two, and steps follow each other in one device queue).
WORKSPACE_BYTES = 128 << 20
# FlashInfer's own FA2 kernels for both paths: the tensor-core decode runs the prefill kernel too, so one JIT
# module per head size serves decode and prefill (the "auto" choice would build an FA3 module on Hopper as well).
KERNEL_BACKEND = "fa2"


@dataclass(frozen=True)
class PageLists:
    """One step's paged context in FlashInfer's CSR form: host arrays (pinned when the step is on CUDA, so FlashInfer's
    uploads do not wait for the device), page ids on the step's device."""

    query_indptr: Tensor  # [B + 1] int32, host: offsets of each sequence's new tokens (= query_start_loc)
    page_indptr: Tensor  # [B + 1] int32, host: offsets of each sequence's pages in `page_ids`
    page_ids: Tensor  # [total pages] int32, device: the block ids each sequence reads, in order
    last_page_len: Tensor  # [B] int32, host: tokens in each sequence's last page (1..block_size)
    seq_lens: Tensor  # [B] int32, host: context length of each sequence

    @classmethod
    def of(cls, metadata: AttentionMetadata, block_size: int) -> PageLists:
        """The pages covering each sequence's `seq_len` tokens, taken from its block table without a device sync."""
        seq_lens = torch.tensor(metadata.seq_lens_host, dtype=torch.int64)  # [B]
        num_pages = (seq_lens + block_size - 1) // block_size  # [B]
        page_indptr = torch.zeros(metadata.num_sequences + 1, dtype=torch.int64)
        page_indptr[1:] = torch.cumsum(num_pages, dim=0)
        query_indptr = torch.zeros(metadata.num_sequences + 1, dtype=torch.int64)
        query_indptr[1:] = torch.cumsum(torch.tensor(metadata.query_lens_host, dtype=torch.int64), dim=0)
        # Flat position of each needed table entry: row b, columns 0 .. num_pages[b] - 1.
        rows = torch.repeat_interleave(torch.arange(metadata.num_sequences), num_pages)  # [P]
        columns = torch.arange(int(page_indptr[-1])) - torch.repeat_interleave(page_indptr[:-1], num_pages)  # [P]
        table_entries = rows * metadata.block_tables.shape[1] + columns  # [P]
        device = metadata.block_tables.device
        pinned = device.type == "cuda"
        return cls(
            query_indptr=_host_int32(query_indptr, pinned),
            page_indptr=_host_int32(page_indptr, pinned),
            page_ids=metadata.block_tables.flatten()[to_device_no_sync(table_entries, device)],
            last_page_len=_host_int32(seq_lens - (num_pages - 1) * block_size, pinned),
            seq_lens=_host_int32(seq_lens, pinned),
        )


class FlashInferPagedAttention:
    """The `AttentionBackend[PagedKVCache]` over FlashInfer (bf16 paged cache, CUDA). One instance serves every
    layer."""

    # Each step is planned on the host from its metadata; a replayed CUDA graph would keep the captured plan.
    cuda_graph_safe: ClassVar[bool] = False

    def __init__(self) -> None:
        import arbi_kernels  # noqa: F401 (the KV write; imports triton: fail at boot, not at the first request)

        self._decode: Any = None  # flashinfer.BatchDecodeWithPagedKVCacheWrapper, built on the first step
        self._prefill: Any = None  # flashinfer.BatchPrefillWithPagedKVCacheWrapper
        self._planned: AttentionMetadata | None = None  # the step the wrappers are planned for
        self._plan_copied: torch.cuda.Event | None = None  # after the last plan's upload from pinned memory

    @classmethod
    def for_dtypes(cls, dtype: str, kv_cache_dtype: str) -> FlashInferPagedAttention:
        """The backend for `dtype` activations over a `kv_cache_dtype` cache, or the reason it cannot serve them."""
        if (dtype, kv_cache_dtype) != ("bfloat16", "bfloat16"):
            raise InvalidArgumentError(
                "attention_backend",
                f"'flashinfer' is wired for bfloat16 activations and KV cache, not dtype {dtype!r} with KV cache "
                f"{kv_cache_dtype!r}; serve with --dtype bfloat16 --kv-cache-dtype auto, or use --attention-backend "
                "triton",
            )
        try:
            import flashinfer  # noqa: F401 (fail at boot, not at the first request)
        except ImportError as error:
            raise MissingDependencyError(
                f"attention backend 'flashinfer' needs the FlashInfer package, which does not import here ({error}); "
                f"install {FLASHINFER_WHEEL} with apache-tvm-ffi (its kernels are compiled with nvcc, which must be "
                "on PATH, on first use), or use --attention-backend triton"
            ) from error
        return cls()

    def forward(
        self,
        layer_index: int,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        metadata: AttentionMetadata,
        kv_cache: PagedKVCache,
    ) -> Tensor:
        from arbi_kernels import write_kv_cache

        key_cache, value_cache = kv_cache.layer(layer_index)
        write_kv_cache(key, value, key_cache, value_cache, metadata.slot_mapping)
        if metadata is not self._planned:
            self._plan(metadata, query, kv_cache)
        wrapper = self._decode if metadata.is_decode_only else self._prefill
        return wrapper.run(query, (key_cache, value_cache))  # [T, H, D]

    def _plan(self, metadata: AttentionMetadata, query: Tensor, kv_cache: PagedKVCache) -> None:
        """Plan the step's wrapper once; every layer of the step then runs on that plan."""
        if self._decode is None:
            self._build_wrappers(query.device)
        if self._plan_copied is not None:
            # A plan uploads its work split from the wrapper's pinned buffer with an async copy, and the next plan
            # rewrites that buffer: the previous step (still in flight under overlapped steps) must have copied it.
            self._plan_copied.synchronize()
        pages = PageLists.of(metadata, kv_cache.block_size)
        _, num_heads, head_dim = query.shape
        shape = (num_heads, kv_cache.num_kv_heads, head_dim, kv_cache.block_size)
        options = {"q_data_type": query.dtype, "kv_data_type": kv_cache.dtype, "sm_scale": head_dim**-0.5}
        if metadata.is_decode_only:
            self._decode.plan(pages.page_indptr, pages.page_ids, pages.last_page_len, *shape, **options)
        else:
            # seq_lens given (pinned) spares the wrapper a context-length upload from pageable memory.
            self._prefill.plan(pages.query_indptr, pages.page_indptr, pages.page_ids, pages.last_page_len, *shape,
                               causal=True, seq_lens=pages.seq_lens, **options)
        if query.is_cuda:  # always, when serving; the check lets the planning be tested on the CPU
            self._plan_copied = torch.cuda.Event()
            self._plan_copied.record(torch.cuda.current_stream(query.device))
        self._planned = metadata

    def _build_wrappers(self, device: torch.device) -> None:
        import flashinfer

        workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)  # zeroed before first use
        self._decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            workspace, "NHD", use_tensor_cores=True, backend=KERNEL_BACKEND
        )
        self._prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend=KERNEL_BACKEND)


def _host_int32(values: Tensor, pinned: bool) -> Tensor:
    """`values` as an int32 host tensor, in pinned memory when asked."""
    values = values.to(torch.int32)
    return values.pin_memory() if pinned else values
