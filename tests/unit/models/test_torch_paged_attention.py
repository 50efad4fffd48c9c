"""The torch reference paged attention and the CPU backend (its decodes by the C++ kernel) against plain dense
causal attention, and the metadata they read."""

from __future__ import annotations

import random

import pytest
import torch

from arbi_grpc.attention.metadata import AttentionMetadata, token_positions
from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.attention.cpu_paged import CpuPagedAttention, cpu_paged_attention
from arbi_grpc.attention.torch_paged import TorchPagedAttention
from tests.unit.models.paged_harness import PagedStepRunner, chunked_schedule, tokens_needed


def dense_causal_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """query [L, H, D], key/value [L, Hkv, D] -> [L, H, D] with an explicit softmax and repeated K/V heads."""
    group = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(group, dim=1)  # [L, H, D]
    value = value.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", query, key) / query.shape[-1] ** 0.5  # [H, L, L]
    length = query.shape[0]
    future = torch.ones(length, length, dtype=torch.bool).triu(1)
    weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
    return torch.einsum("hqk,khd->qhd", weights, value)


def _random_sequences(
    generator: torch.Generator, lengths: list[int], heads: int, kv_heads: int, head_dim: int = 8
) -> dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per sequence: query [L, heads, head_dim], key and value [L, kv_heads, head_dim]."""
    return {
        sequence: tuple(
            torch.randn(length, count, head_dim, generator=generator) for count in (heads, kv_heads, kv_heads)
        )
        for sequence, length in enumerate(lengths)
    }


def _play(
    rng: random.Random,
    steps: list[list[tuple[int, int]]],
    sequences: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    block_size: int,
    num_layers: int,
    num_blocks: int = 160,
    backend: TorchPagedAttention = TorchPagedAttention(),
    kv_dtype: torch.dtype = torch.float32,
) -> list[dict[int, torch.Tensor]]:
    """Run each step through the backend on every layer, layer l fed inputs scaled by l + 1 (so a mix-up between
    layers' caches shows), layers in random order. Returns per layer {sequence: outputs of its processed tokens}."""
    kv_heads, head_dim = sequences[0][1].shape[1:]
    kv_cache = PagedKVCache(
        num_layers=num_layers, num_blocks=num_blocks, block_size=block_size, num_kv_heads=kv_heads,
        head_dim=head_dim, dtype=kv_dtype, device="cpu",
    )
    runner = PagedStepRunner(block_size=block_size, num_blocks=num_blocks, rng=rng)
    outputs: list[dict[int, list[torch.Tensor]]] = [{seq: [] for seq in sequences} for _ in range(num_layers)]
    for step in steps:
        metadata, _, spans = runner.plan_step(step)
        flat = [torch.cat([sequences[seq][part][start:end] for seq, start, end in spans]) for part in range(3)]
        for layer in rng.sample(range(num_layers), num_layers):
            output = backend.forward(layer, *(tensor * (layer + 1) for tensor in flat), metadata, kv_cache)
            offset = 0
            for sequence, start, end in spans:
                outputs[layer][sequence].append(output[offset : offset + end - start])
                offset += end - start
    return [{seq: torch.cat(parts) for seq, parts in layer_outputs.items()} for layer_outputs in outputs]


def _expected(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layer: int) -> torch.Tensor:
    return dense_causal_attention(query * (layer + 1), key * (layer + 1), value * (layer + 1))


@pytest.mark.parametrize("decode_group_size", [2, 16, "cpu kernel"])
@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (6, 2), (8, 1)])
def test_chunked_prefill_and_decode_match_dense(decode_group_size, block_size, heads, kv_heads, rng, torch_generator):
    prompt_lens = [rng.randint(2, 30) for _ in range(5)]
    steps = chunked_schedule(rng, prompt_lens, decode_steps=4)
    lengths = [tokens_needed(steps)[sequence] for sequence in range(len(prompt_lens))]
    sequences = _random_sequences(torch_generator, lengths, heads, kv_heads)
    backend = (cpu_paged_attention() if decode_group_size == "cpu kernel"
               else TorchPagedAttention(max_decode_group_size=decode_group_size))
    outputs = _play(rng, steps, sequences, block_size, num_layers=2, num_blocks=200, backend=backend)
    for layer, layer_outputs in enumerate(outputs):
        for sequence, (query, key, value) in sequences.items():
            torch.testing.assert_close(layer_outputs[sequence], _expected(query, key, value, layer))


@pytest.mark.parametrize("kind", ["torch", "cpu"])
def test_a_bfloat16_cache_under_float32_activations_stores_rounded_keys_and_values(kind, rng, torch_generator):
    """--dtype float32 --kv-cache-dtype bfloat16: attention sees exactly the bf16-rounded K/V, in float32."""
    prompt_lens = [rng.randint(2, 30) for _ in range(3)]
    steps = chunked_schedule(rng, prompt_lens, decode_steps=3)
    lengths = [tokens_needed(steps)[sequence] for sequence in range(len(prompt_lens))]
    sequences = _random_sequences(torch_generator, lengths, 6, 2)
    backend = cpu_paged_attention() if kind == "cpu" else TorchPagedAttention()
    outputs = _play(rng, steps, sequences, block_size=4, num_layers=1, kv_dtype=torch.bfloat16, backend=backend)[0]
    for sequence, (query, key, value) in sequences.items():
        assert outputs[sequence].dtype == torch.float32
        rounded = dense_causal_attention(query, key.bfloat16().float(), value.bfloat16().float())
        torch.testing.assert_close(outputs[sequence], rounded)
        assert not torch.allclose(outputs[sequence], dense_causal_attention(query, key, value), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "backend,head_dim",
    [(TorchPagedAttention(), 8), (TorchPagedAttention(max_decode_group_size=5, max_decode_group_tokens=96), 8),
     ("cpu kernel", 8), ("cpu kernel", 12)],
    ids=["default-groups", "small-groups", "cpu-kernel-vectorised", "cpu-kernel-plain-loops"],
)
def test_large_decode_only_batch_matches_dense(backend, head_dim, rng, torch_generator):
    """Head dims of 8 take the CPU kernel's AVX2 loops (where the CPU has them), 12 its plain ones."""
    backend = cpu_paged_attention() if backend == "cpu kernel" else backend
    lengths = [rng.randint(1, 40) for _ in range(48)]
    sequences = _random_sequences(torch_generator, lengths, heads=6, kv_heads=3, head_dim=head_dim)
    # Prefill everything but the last token (one-token prompts have nothing to prefill), then one decode step.
    prefill = [(seq, length - 1) for seq, length in enumerate(lengths) if length > 1]
    decode = [(seq, 1) for seq in range(len(lengths))]
    rng.shuffle(decode)
    outputs = _play(rng, [prefill, decode], sequences, block_size=8, num_layers=1, num_blocks=48 * 5, backend=backend)
    for sequence, (query, key, value) in sequences.items():
        torch.testing.assert_close(outputs[0][sequence][-1:], _expected(query, key, value, 0)[-1:])


def test_the_cpu_kernel_refuses_a_block_id_outside_the_pool():
    backend = cpu_paged_attention()
    assert isinstance(backend, CpuPagedAttention)
    cache = PagedKVCache(num_layers=1, num_blocks=2, block_size=4, num_kv_heads=1, head_dim=8, dtype=torch.float32,
                         device="cpu")
    metadata = AttentionMetadata.build(query_lens=[1], seq_lens=[3], block_tables=[[5]], block_size=4)
    query = torch.randn(1, 2, 8)
    with pytest.raises(RuntimeError, match="block id out of range"):
        backend.attend_decodes(query, *cache.layer(0), metadata, cache.block_size)


def test_the_cpu_cache_write_stores_strided_token_rows_as_the_reference_does(torch_generator):
    """Keys and values as the model passes them: head views sliced out of one fused q|k|v row per token."""
    kv_heads, head_dim, tokens = 2, 8, 5
    fused = torch.randn(tokens, 3 * kv_heads * head_dim, generator=torch_generator)
    key = fused[:, kv_heads * head_dim: 2 * kv_heads * head_dim].view(tokens, kv_heads, head_dim)
    value = fused[:, 2 * kv_heads * head_dim:].view(tokens, kv_heads, head_dim)
    slots = torch.tensor([9, 0, 3, 14, 7])
    caches = {}
    for name, backend in (("reference", TorchPagedAttention()), ("cpu", cpu_paged_attention())):
        cache = PagedKVCache(num_layers=1, num_blocks=4, block_size=4, num_kv_heads=kv_heads, head_dim=head_dim,
                             dtype=torch.float32, device="cpu")
        backend.write_cache(key, value, slots, *cache.layer(0))
        caches[name] = cache.layer(0)
    assert all(torch.equal(a, b) for a, b in zip(caches["reference"], caches["cpu"]))
    assert caches["cpu"][0].view(-1, kv_heads, head_dim)[14].equal(key[3])


def test_the_cpu_cache_write_refuses_a_slot_outside_the_pool():
    cache = PagedKVCache(num_layers=1, num_blocks=2, block_size=4, num_kv_heads=1, head_dim=8, dtype=torch.float32,
                         device="cpu")
    key_cache, value_cache = cache.layer(0)
    before = key_cache.clone()
    with pytest.raises(RuntimeError, match="slot 8 outside the cache's 8"):
        cpu_paged_attention().write_cache(torch.ones(2, 1, 8), torch.ones(2, 1, 8), torch.tensor([1, 8]),
                                          key_cache, value_cache)
    assert torch.equal(key_cache, before)  # checked before anything is written


def test_decode_groups_respect_both_limits(rng):
    backend = TorchPagedAttention(max_decode_group_size=4, max_decode_group_tokens=64)
    block_size = 8
    sorted_lens = tuple(sorted(rng.randint(1, 70) for _ in range(30)))
    groups = list(backend._decode_groups(sorted_lens, block_size))
    assert groups[0][0] == 0 and groups[-1][1] == len(sorted_lens)
    for (start, end), (next_start, _) in zip(groups, groups[1:]):
        assert end == next_start
    for start, end in groups:
        padded_longest = -(-sorted_lens[end - 1] // block_size) * block_size
        assert end - start == 1 or ((end - start) <= 4 and (end - start) * padded_longest <= 64)


def test_for_device_bounds_decode_groups_on_cpu_only():
    assert TorchPagedAttention.for_device("cpu") == TorchPagedAttention()
    accelerator = TorchPagedAttention.for_device("cuda:0")
    sorted_lens = tuple(range(1, 200))
    assert list(accelerator._decode_groups(sorted_lens, block_size=16)) == [(0, len(sorted_lens))]


def test_metadata_build_maps_tokens_to_their_block_slots():
    block_size = 4
    tables = [[7, 2, 5], [0], [3, 9], [4]]
    query_lens, seq_lens = [3, 1, 6, 1], [10, 2, 6, 1]
    metadata = AttentionMetadata.build(
        query_lens=query_lens, seq_lens=seq_lens, block_tables=tables, block_size=block_size
    )
    # Sequence 0 writes positions 7, 8, 9; sequence 1 position 1; sequence 2 positions 0..5; sequence 3 position 0.
    expected_slots = [2 * 4 + 3, 5 * 4 + 0, 5 * 4 + 1, 0 * 4 + 1, 12, 13, 14, 15, 36, 37, 4 * 4]
    assert metadata.slot_mapping.tolist() == expected_slots
    assert metadata.query_start_loc.tolist() == [0, 3, 4, 10, 11]
    assert metadata.block_tables.tolist() == [[7, 2, 5], [0, 0, 0], [3, 9, 0], [4, 0, 0]]
    assert metadata.decode_sequence_indices.tolist() == [3, 1]  # by increasing seq_len
    assert metadata.decode_seq_lens_host == (1, 2)
    assert metadata.prefill_sequence_indices == (0, 2)
    assert token_positions(query_lens, seq_lens).tolist() == [7, 8, 9, 1, 0, 1, 2, 3, 4, 5, 0]


def test_metadata_rejects_a_block_table_too_short():
    with pytest.raises(ValueError, match="cannot hold"):
        AttentionMetadata.build(query_lens=[2], seq_lens=[9], block_tables=[[0, 1]], block_size=4)


def test_bytes_per_block_counts_every_layer_key_and_value():
    cache = PagedKVCache(
        num_layers=3, num_blocks=5, block_size=16, num_kv_heads=2, head_dim=8, dtype=torch.bfloat16, device="cpu"
    )
    assert cache.bytes_per_block == 2 * 3 * 16 * 2 * 8 * 2
    total = sum(tensor.numel() * tensor.element_size() for tensor in cache.key_caches + cache.value_caches)
    assert total == cache.bytes_per_block * cache.num_blocks
