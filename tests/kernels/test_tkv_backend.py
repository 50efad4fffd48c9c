"""TkvTritonPagedAttention against TkvTorchPagedAttention, step by step on two TkvPagedKVCaches: the same encoding
after every write, the same attention output for prefill chunks, mixed steps and pure decode steps."""

from __future__ import annotations

import torch
from arbi_kernels.tkv_testing import assert_same_encoding

from arbi_grpc.kv_codec import TkvCalibration
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache
from arbi_grpc.kv_codec import torch_attention
from arbi_grpc.kv_codec.torch_attention import TkvTorchPagedAttention
from arbi_grpc.kv_codec.triton_attention import (
    TkvTritonPagedAttention,
    new_token_positions,
)
from arbi_grpc.models.attention_metadata import AttentionMetadata, token_positions

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


def test_matches_the_torch_backend_over_prefill_mixed_and_decode_steps(device, generator, monkeypatch):
    calibration = _calibration(generator)
    caches = [TkvPagedKVCache(calibration, num_blocks=12, block_size=BLOCK_SIZE, device=device, num_sink_blocks=10)
              for _ in range(2)]  # sink rows for the first blocks only, as the engine's pool has them
    backends = (TkvTritonPagedAttention(compute_dtype=torch.float32), TkvTorchPagedAttention.for_device(device))
    tables = [[3, 7, 1], [0, 5], [9, 2, 11]]
    steps = [  # (sequences, query_lens, seq_lens): a prompt chunk, a mixed step, a decode step
        ([0, 1], [20, 3], [20, 3]),
        ([0, 1, 2], [1, 17, 35], [21, 20, 35]),
        ([0, 1, 2], [1, 1, 1], [22, 21, 36]),
    ]
    for sequences, query_lens, seq_lens in steps:
        metadata = AttentionMetadata.build(
            query_lens=query_lens, seq_lens=seq_lens, block_tables=[tables[s] for s in sequences],
            block_size=BLOCK_SIZE, device=device,
        )
        assert torch.equal(new_token_positions(metadata).cpu(), token_positions(query_lens, seq_lens))
        num_tokens = sum(query_lens)
        query = torch.randn((num_tokens, NUM_HEADS, HEAD_DIM), generator=generator).to(device)
        key = torch.randn((num_tokens, NUM_KV_HEADS, HEAD_DIM), generator=generator).to(device)
        value = torch.randn((num_tokens, NUM_KV_HEADS, HEAD_DIM), generator=generator).to(device)
        for layer in range(2):
            triton_output = backends[0].forward(layer, query, key, value, metadata, caches[0])
            backends[1].forward(layer, query, key, value, metadata, caches[1])
            assert_same_encoding(caches[0].layer(layer), caches[1].layer(layer))
            # Attention is compared over the same codes: the torch backend reads the Triton-written cache (its
            # write skipped), since near-ties may encode a few groups one step apart (assert_same_encoding).
            with monkeypatch.context() as patch:
                patch.setattr(torch_attention, "write_tokens", lambda *args: None)
                reference = backends[1].forward(layer, query, key, value, metadata, caches[0])
            torch.testing.assert_close(triton_output, reference, atol=1e-4, rtol=1e-4)
