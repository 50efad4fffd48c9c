"""The TKV attention backend on the Triton kernels: quantize this step's K/V into their slots (write_tkv_cache,
which also returns them exact in the code space), transform the queries into the key code space, attend with the
fused-dequantization decode or prefill kernel (each query's exact window, and with the cache's `chunk_exact` a
prefill chunk's own tokens, read exact: this step's tokens from the exact buffers, earlier ones from the sequence's
tail slot, docs/tkv.md), keep each sequence's last blocks in its tail
slot (store_tkv_tail, after attention), and bring the output back from the value code space. The two transforms
are one kernel launch each (arbi_kernels.tkv_transforms), tested bit for bit against attention_transforms, the
torch backend's.

A mixed step (prefill chunks beside decodes) runs its leading decode rows (the scheduler puts running decodes
first) through the decode kernel and only the rest through the prefill kernel (`split_mixed_steps`): the prefill
kernel gives every query head of a one-token chunk a program of its own that decodes the whole context's codes, four
times the decode kernel's work at Llama-3-8B's GQA, for one valid row of a 64-row tile. For a one-token chunk both
kernels read the same keys exactly (the two prefill rules agree for chunks of at most one block), so only float
rounding moves.

It never reads a device value on the host: token positions (which the sink pool needs) are derived on the
device from the metadata, and the decode split is sized from `metadata.max_seq_len`, so a decode step can run
inside a CUDA graph as the bf16 Triton backend's does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from arbi_grpc.attention.metadata import AttentionMetadata
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache


def new_token_positions(metadata: AttentionMetadata) -> Tensor:
    """Sequence position of each new token, [T] int64 on the metadata's device, without a host sync."""
    if metadata.is_decode_only:
        return metadata.seq_lens.long() - 1
    query_start_loc = metadata.query_start_loc
    tokens = torch.arange(metadata.num_tokens, device=query_start_loc.device, dtype=query_start_loc.dtype)
    sequence = torch.searchsorted(query_start_loc[1:], tokens, right=True)  # [T] sequence of each token
    # Token t of sequence b sits at seq_len[b] - query_len[b] + (t - start[b]) = seq_len[b] - start[b + 1] + t.
    return metadata.seq_lens.long()[sequence] - query_start_loc.long()[sequence + 1] + tokens.long()


def leading_decodes(metadata: AttentionMetadata) -> int:
    """How many sequences from the first have one new token each (a mixed step's decode rows, which the scheduler
    puts first), from the host's copy of the layout; the step's sequences themselves for a pure decode step."""
    count = 0
    for query_len in metadata.query_lens_host:
        if query_len != 1:
            break
        count += 1
    return count


@dataclass(frozen=True)
class MixedStepPlan:
    """How a mixed step splits: its first `num_decodes` sequences go to the decode kernel, the rest to the prefill
    kernel with their own metadata tensors. Those are fresh copies, not views past row 0: a view's address moves
    with num_decodes, and Triton compiles a kernel again for each 16-byte alignment of a pointer it is given (a
    stall of seconds in the middle of serving)."""

    num_decodes: int
    query_start_loc: Tensor  # [B_rest + 1] int32, from 0
    seq_lens: Tensor  # [B_rest] int32
    block_tables: Tensor  # [B_rest, max_blocks] int32
    batch_slots: Tensor  # [B_rest] int32
    max_prefix_len: int  # the longest cached prefix among the rest (seq_len - query_len)

    @classmethod
    def of(cls, metadata: AttentionMetadata, num_decodes: int) -> MixedStepPlan:
        max_prefix_len = max((seq_len - query_len for seq_len, query_len in zip(
            metadata.seq_lens_host[num_decodes:], metadata.query_lens_host[num_decodes:])), default=0)
        if not num_decodes:
            return cls(0, metadata.query_start_loc, metadata.seq_lens, metadata.block_tables, metadata.batch_slots,
                       max_prefix_len)
        return cls(
            num_decodes=num_decodes,
            query_start_loc=metadata.query_start_loc[num_decodes:] - num_decodes,
            seq_lens=metadata.seq_lens[num_decodes:].clone(),
            block_tables=metadata.block_tables[num_decodes:].clone(),
            batch_slots=metadata.batch_slots[num_decodes:].clone(),
            max_prefix_len=max_prefix_len,
        )


@dataclass(frozen=True)
class TkvTritonPagedAttention:
    """The `AttentionBackend[TkvPagedKVCache]` on CUDA (or Triton's interpreter on CPU, for tests).

    compute_dtype: the dtype q' and the decoded K/V tiles enter the kernels' dots in; float16 uses tensor
    cores (relative rounding 2^-11, below every TKV step), float32 gives exact products at a large cost.
    split_mixed_steps: a mixed step's leading decode rows go to the decode kernel (the module's docstring); False
    sends every row of a mixed step through the prefill kernel (what benchmarks compare against).
    """

    compute_dtype: torch.dtype = torch.float16
    split_mixed_steps: bool = True
    cuda_graph_safe: ClassVar[bool] = True

    def __post_init__(self) -> None:
        import arbi_kernels  # noqa: F401 (imports triton: fail at boot, not at the first request)

    def forward(
        self,
        layer_index: int,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        metadata: AttentionMetadata,
        kv_cache: TkvPagedKVCache,
    ) -> Tensor:
        from arbi_kernels import (
            store_tkv_tail,
            tkv_paged_decode_attention,
            tkv_paged_prefill_attention,
            tkv_transform_output,
            tkv_transform_queries,
            write_tkv_cache,
        )

        storage = kv_cache.layer(layer_index)
        key_exact, value_exact = write_tkv_cache(key, value, new_token_positions(metadata), metadata.slot_mapping,
                                                 storage)  # [T, Hkv, D] fp16, code space
        transformed = tkv_transform_queries(query, storage)  # q': [T, Hq, D] fp32
        softmax_scale = query.shape[-1] ** -0.5
        exact = (metadata.batch_slots, key_exact, value_exact)
        if metadata.is_decode_only:  # token row b is sequence b
            accumulated = tkv_paged_decode_attention(
                transformed, storage, metadata.block_tables, metadata.seq_lens, *exact, softmax_scale,
                max_seq_len=metadata.max_seq_len, compute_dtype=self.compute_dtype,
            )
        else:
            plan = self._mixed_plan(metadata)
            accumulated = torch.empty(transformed.shape, dtype=torch.float32, device=transformed.device)
            if plan.num_decodes:  # rows 0 .. num_decodes - 1 are sequences 0 .. num_decodes - 1, one token each
                head = slice(0, plan.num_decodes)
                tkv_paged_decode_attention(
                    transformed[head], storage, metadata.block_tables[head], metadata.seq_lens[head],
                    metadata.batch_slots[head], key_exact[head], value_exact[head], softmax_scale,
                    max_seq_len=max(metadata.seq_lens_host[head]), compute_dtype=self.compute_dtype,
                    out=accumulated[head],
                )
            rest = slice(plan.num_decodes, None)
            tkv_paged_prefill_attention(
                transformed[rest], storage, plan.block_tables, plan.query_start_loc, plan.seq_lens, plan.batch_slots,
                key_exact[rest], value_exact[rest], softmax_scale, max_query_len=metadata.max_query_len,
                compute_dtype=self.compute_dtype, chunk_exact=kv_cache.chunk_exact, out=accumulated[rest],
                max_prefix_len=plan.max_prefix_len,
            )
        store_tkv_tail(key_exact, value_exact, storage, metadata.query_start_loc, metadata.seq_lens,
                       metadata.batch_slots)  # after attention: a chunk may still read the old tail rows
        return tkv_transform_output(accumulated, storage, query.dtype)

    def _mixed_plan(self, metadata: AttentionMetadata) -> MixedStepPlan:
        """The step's `MixedStepPlan`, the same in every layer: made at the first and kept in `metadata.plans`."""
        key = (type(self), self.split_mixed_steps, "mixed")
        plan = metadata.plans.get(key)
        if plan is None:
            plan = metadata.plans[key] = MixedStepPlan.of(
                metadata, leading_decodes(metadata) if self.split_mixed_steps else 0)
        return plan
