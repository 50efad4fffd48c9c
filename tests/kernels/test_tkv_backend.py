"""TkvTritonPagedAttention against TkvTorchPagedAttention, step by step on two TkvPagedKVCaches: the same encoding
and the same tails after every step, the same attention output for prefill chunks (from a block's start, from
mid-block across one or two block boundaries), mixed steps and pure decode steps, with batch slots that are not
the batch rows."""

from __future__ import annotations

import torch

from arbi_grpc.attention.metadata import AttentionMetadata, token_positions
from arbi_grpc.kv_codec import TkvCalibration, torch_attention
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache
from arbi_grpc.kv_codec.torch_attention import TkvTorchPagedAttention
from arbi_grpc.kv_codec.triton_attention import (
    TkvTritonPagedAttention,
    new_token_positions,
)
from tests.kernels.tkv_batches import assert_same_encoding, copy_pools

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE = 4, 2, 64, 16


def _calibration(generator: torch.Generator) -> TkvCalibration:
    shape = (2, NUM_KV_HEADS, HEAD_DIM)  # two layers with different bits

    def scales() -> torch.Tensor:
        return torch.exp(0.3 * torch.randn(shape, generator=generator))

    return TkvCalibration(
        model_fingerprint="tkvfp1:" + "0" * 32, group_size=32, rotate=True, layer_bits=((4, 4), (3, 5)),
        key_scales=scales(), value_scales=scales(), key_shifts=0.5 * torch.randn(shape, generator=generator),
        value_shifts=0.2 * torch.randn(shape, generator=generator), sink_tokens=2,
    )


def _tails(cache: TkvPagedKVCache, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    storage = cache.layer(layer)
    return storage.key_tail.clone(), storage.value_tail.clone()


def test_matches_the_torch_backend_over_prefill_mixed_and_decode_steps(device, generator, monkeypatch):
    calibration = _calibration(generator)
    caches = [TkvPagedKVCache(calibration, num_blocks=12, block_size=BLOCK_SIZE, device=device, num_sink_blocks=10,
                              num_tail_slots=5) for _ in range(2)]  # sink rows for the first blocks only
    backends = (TkvTritonPagedAttention(compute_dtype=torch.float32), TkvTorchPagedAttention.for_device(device))
    tables = [[3, 7, 1, 4], [0, 5], [9, 2]]
    batch_slots = [3, 0, 4]  # sequence -> its batch slot (and so its tail ring)
    steps = [  # (sequences, query_lens, seq_lens)
        ([0, 1], [20, 3], [20, 3]),  # prompt chunks from position 0, one across a block boundary
        ([0, 1, 2], [1, 17, 18], [21, 20, 18]),  # a decode, a chunk from mid-block across a boundary, a prompt
        ([2, 0], [1, 28], [19, 49]),  # a decode, a chunk from mid-block across two boundaries
        ([0, 1, 2], [1, 1, 1], [50, 21, 20]),  # decode
        ([1, 2, 0], [1, 1, 6], [22, 21, 56]),  # two leading decodes (the decode kernel's), then a mid-block chunk
        ([0, 1], [3, 1], [59, 23]),  # a chunk, then a decode: every row through the prefill kernel
    ]
    original_write = torch_attention.write_tokens
    for sequences, query_lens, seq_lens in steps:
        metadata = AttentionMetadata.build(
            query_lens=query_lens, seq_lens=seq_lens, block_tables=[tables[s] for s in sequences],
            block_size=BLOCK_SIZE, device=device, batch_slots=[batch_slots[s] for s in sequences],
        )
        assert torch.equal(new_token_positions(metadata).cpu(), token_positions(query_lens, seq_lens))
        num_tokens = sum(query_lens)
        query = torch.randn((num_tokens, NUM_HEADS, HEAD_DIM), generator=generator).to(device)
        key = torch.randn((num_tokens, NUM_KV_HEADS, HEAD_DIM), generator=generator).to(device)
        value = torch.randn((num_tokens, NUM_KV_HEADS, HEAD_DIM), generator=generator).to(device)
        for layer in range(2):
            tails_before = _tails(caches[0], layer)
            triton_output = backends[0].forward(layer, query, key, value, metadata, caches[0])
            backends[1].forward(layer, query, key, value, metadata, caches[1])
            assert_same_encoding(caches[0].layer(layer), caches[1].layer(layer))
            for triton_tail, torch_tail in zip(_tails(caches[0], layer), _tails(caches[1], layer)):
                assert torch.equal(triton_tail, torch_tail)
            # Attention is compared over the same codes: the torch backend reads the Triton-written cache with the
            # tails it had before the step (its write only computes the exact tokens, on a copy), since near-ties
            # may encode a few groups one step apart (assert_same_encoding).
            storage = caches[0].layer(layer)
            storage.key_tail.copy_(tails_before[0])
            storage.value_tail.copy_(tails_before[1])
            with monkeypatch.context() as patch:
                patch.setattr(torch_attention, "write_tokens",
                              lambda storage, *args: original_write(copy_pools(storage), *args))
                reference = backends[1].forward(layer, query, key, value, metadata, caches[0])
            torch.testing.assert_close(triton_output, reference, atol=1e-4, rtol=1e-4)


def test_a_mixed_steps_leading_decodes_go_to_the_decode_kernel(device, generator, monkeypatch):
    """The split (split_mixed_steps) hands the decode kernel exactly the leading one-token rows, and the step's
    output matches every row through the prefill kernel."""
    import arbi_kernels

    calibration = _calibration(generator)
    cache = TkvPagedKVCache(calibration, num_blocks=12, block_size=BLOCK_SIZE, device=device, num_sink_blocks=10,
                            num_tail_slots=5, exact_blocks=2)
    split, whole = TkvTritonPagedAttention(compute_dtype=torch.float32), TkvTritonPagedAttention(
        compute_dtype=torch.float32, split_mixed_steps=False)
    tables, batch_slots = [[3, 7, 1, 4], [0, 5], [9, 2]], [3, 0, 4]
    decode_rows = []
    original = arbi_kernels.tkv_paged_decode_attention

    def spy(query, *args, **kwargs):
        decode_rows.append(query.shape[0])
        return original(query, *args, **kwargs)

    monkeypatch.setattr(arbi_kernels, "tkv_paged_decode_attention", spy)
    for sequences, query_lens, seq_lens, expected_rows in (
        ([0, 1, 2], [40, 19, 21], [40, 19, 21], []),  # prompts
        ([2, 1, 0], [1, 1, 9], [22, 20, 49], [2]),  # two decodes, then a chunk
        ([0, 1, 2], [1, 3, 1], [50, 23, 23], [1]),  # one leading decode; the later one goes with the chunk
    ):
        metadata = AttentionMetadata.build(
            query_lens=query_lens, seq_lens=seq_lens, block_tables=[tables[s] for s in sequences],
            block_size=BLOCK_SIZE, device=device, batch_slots=[batch_slots[s] for s in sequences],
        )
        num_tokens = sum(query_lens)
        query = torch.randn((num_tokens, NUM_HEADS, HEAD_DIM), generator=generator).to(device)
        key = torch.randn((num_tokens, NUM_KV_HEADS, HEAD_DIM), generator=generator).to(device)
        value = torch.randn((num_tokens, NUM_KV_HEADS, HEAD_DIM), generator=generator).to(device)
        tails = _tails(cache, 0)
        decode_rows.clear()
        reference = whole.forward(0, query, key, value, metadata, cache)
        assert decode_rows == []
        storage = cache.layer(0)  # the second forward rewrites the same codes; it must see the tails of before
        storage.key_tail.copy_(tails[0])
        storage.value_tail.copy_(tails[1])
        output = split.forward(0, query, key, value, metadata, cache)
        assert decode_rows == expected_rows
        assert torch.isfinite(output).all()
        torch.testing.assert_close(output, reference, atol=1e-4, rtol=1e-4)
