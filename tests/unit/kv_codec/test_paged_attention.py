"""TkvTorchPagedAttention against the codec's reference attention (same codes, exact sinks and exact windows of
1 to 3 blocks, under both prefill rules: a chunk's own tokens exact, or only each query's window) and against plain
attention (K8V8), over prefill chunks, ragged batches with decodes, sinks on and off, per-layer bits, and a prefix
hit whose window's reused blocks are seeded decoded into the tail ring."""

from __future__ import annotations

import random

import pytest
import torch

from arbi_grpc.kv_codec import TkvCalibration
from arbi_grpc.kv_codec.attention import rotated_space_attention
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache
from arbi_grpc.kv_codec.quantize import dequantize_groups
from arbi_grpc.kv_codec.torch_attention import TkvTorchPagedAttention
from tests.unit.models.paged_harness import (
    PagedStepRunner,
    chunked_schedule,
    tokens_needed,
)
from tests.unit.models.test_torch_paged_attention import dense_causal_attention

HEADS, KV_HEADS, HEAD_DIM = 6, 2, 32

Sequences = dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def _calibration(layer_bits, generator: torch.Generator, group_size: int = 16, sink_tokens: int = 1):
    shape = (len(layer_bits), KV_HEADS, HEAD_DIM)

    def scales() -> torch.Tensor:
        return (0.3 * torch.randn(shape, generator=generator)).exp()

    def shifts() -> torch.Tensor:
        return 0.5 * torch.randn(shape, generator=generator)

    return TkvCalibration(
        "tkvfp1:test", group_size, True, tuple(layer_bits), scales(), scales(), shifts(), shifts(), "test", sink_tokens
    )


def _sequences(generator: torch.Generator, lengths: list[int]) -> Sequences:
    """Per sequence: query [L, HEADS, D], key and value [L, KV_HEADS, D]; keys carry a per-channel offset."""
    offset = 2 * torch.randn(KV_HEADS, HEAD_DIM, generator=generator)
    return {
        sequence: (
            torch.randn(length, HEADS, HEAD_DIM, generator=generator),
            torch.randn(length, KV_HEADS, HEAD_DIM, generator=generator) + offset,
            torch.randn(length, KV_HEADS, HEAD_DIM, generator=generator),
        )
        for sequence, length in enumerate(lengths)
    }


def _play(
    rng: random.Random,
    steps: list[list[tuple[int, int]]],
    sequences: Sequences,
    calibration: TkvCalibration,
    block_size: int,
    backend: TkvTorchPagedAttention | None = None,
    exact_blocks: int = 1,
    chunk_exact: bool = True,
) -> list[dict[int, torch.Tensor]]:
    """Each step through every layer (in random order); returns per layer {sequence: outputs of its tokens}."""
    num_blocks = sum(-(-len(q) // block_size) for q, _, _ in sequences.values()) + 3
    cache = TkvPagedKVCache(calibration, num_blocks=num_blocks, block_size=block_size, device="cpu",
                            num_tail_slots=len(sequences), exact_blocks=exact_blocks, chunk_exact=chunk_exact)
    runner = PagedStepRunner(block_size=block_size, num_blocks=num_blocks, rng=rng)
    return _play_on(rng, steps, sequences, cache, runner, backend or TkvTorchPagedAttention())


def _play_on(
    rng: random.Random,
    steps: list[list[tuple[int, int]]],
    sequences: Sequences,
    cache: TkvPagedKVCache,
    runner: PagedStepRunner,
    backend: TkvTorchPagedAttention,
) -> list[dict[int, torch.Tensor]]:
    """`_play` over a given cache and step runner (their state carries over between calls)."""
    calibration = cache.calibration
    outputs: list[dict[int, list[torch.Tensor]]] = [{s: [] for s in sequences} for _ in calibration.layer_bits]
    for step in steps:
        metadata, _, spans = runner.plan_step(step)
        flat = [torch.cat([sequences[seq][part][start:end] for seq, start, end in spans]) for part in range(3)]
        for layer in rng.sample(range(calibration.num_layers), calibration.num_layers):
            output = backend.forward(layer, *flat, metadata, cache)
            offset = 0
            for sequence, start, end in spans:
                outputs[layer][sequence].append(output[offset : offset + end - start])
                offset += end - start
    return [{seq: torch.cat(parts) for seq, parts in layer.items() if parts} for layer in outputs]


def _exact_rotated(codec, transform, x: torch.Tensor) -> torch.Tensor:
    """x [N, Hkv, D] as the cache keeps it exactly, fp16 in the code space (H x - m) * s, back in the rotated
    space H x."""
    stored = transform.forward(codec.into_rotated_space(x.float())).half().float()
    return transform.inverse(stored)


def _chunk_starts(steps: list[list[tuple[int, int]]], sequence: int, first: int = 0) -> list[int]:
    """The first position of the chunk each position of `sequence` was computed in (its tokens from `first` on,
    padded with 0 below it)."""
    starts, processed = [0] * first, first
    for step in steps:
        for chunk_sequence, new_tokens in step:
            if chunk_sequence == sequence:
                starts += [processed] * new_tokens
                processed += new_tokens
    return starts


def _reference(calibration: TkvCalibration, layer: int, block_size: int, query, key, value, exact_blocks: int = 1,
               exact_from: int = 0, chunk_starts: list[int] | None = None) -> torch.Tensor:
    """Token by token: query t over keys 0..t, the first sink_tokens and those of t's window (its own block and the
    exact_blocks - 1 before it; with `chunk_starts`, the window of its chunk's first position and all after it)
    exact (fp16 in the code space), the others decoded from their codes. Keys below `exact_from` (a prefix hit's
    reused blocks) are decoded in the window too, there rounded to the fp16 of the tail ring they were seeded into;
    the rows of queries from `exact_from` on are returned."""
    codec = calibration.layer_codec(layer)
    keys = codec.decode_keys_rotated(codec.encode_keys(key))  # [L, Hkv, D] rotated space
    values = codec.decode_values_rotated(codec.encode_values(value))
    exact_keys, exact_values = _exact_rotated(codec, codec.keys, key), _exact_rotated(codec, codec.values, value)
    seeded_keys, seeded_values = (
        transform.inverse(dequantize_groups(encode(x)).half().float())
        for transform, encode, x in ((codec.keys, codec.encode_keys, key), (codec.values, codec.encode_values, value))
    )
    rows = []
    for t in range(exact_from, query.shape[0]):
        window = torch.zeros(t + 1, dtype=torch.bool)
        first = t if chunk_starts is None else chunk_starts[t]
        window[max(first // block_size - exact_blocks + 1, 0) * block_size:] = True
        seeded = window.clone()
        seeded[exact_from:] = False
        exact = window & ~seeded
        exact[: calibration.sink_tokens] = True
        seeded[: calibration.sink_tokens] = False
        row_keys = torch.where(exact[:, None, None], exact_keys[: t + 1],
                               torch.where(seeded[:, None, None], seeded_keys[: t + 1], keys[: t + 1]))
        row_values = torch.where(exact[:, None, None], exact_values[: t + 1],
                                 torch.where(seeded[:, None, None], seeded_values[: t + 1], values[: t + 1]))
        rows.append(rotated_space_attention(query[t : t + 1], row_keys, row_values, codec, causal=True))
    return torch.cat(rows)


@pytest.mark.parametrize("block_size,exact_blocks", [(4, 1), (16, 1), (4, 2), (4, 3)])
@pytest.mark.parametrize("sink_tokens", [0, 1, 3])
@pytest.mark.parametrize("chunk_exact", [True, False])
def test_chunked_ragged_batches_match_the_codec_reference(block_size, exact_blocks, sink_tokens, chunk_exact,
                                                          generator):
    rng = random.Random(int(torch.randint(2**31, (1,), generator=generator)))
    prompt_lens = [rng.randint(2, 24) for _ in range(4)] + [1]
    steps = chunked_schedule(rng, prompt_lens, decode_steps=3)
    sequences = _sequences(generator, [tokens_needed(steps)[s] for s in range(len(prompt_lens))])
    calibration = _calibration([(8, 8), (4, 3), (3, 2)], generator, sink_tokens=sink_tokens)
    outputs = _play(rng, steps, sequences, calibration, block_size, TkvTorchPagedAttention(max_decode_group_size=2),
                    exact_blocks, chunk_exact)
    for layer in range(calibration.num_layers):
        for sequence, (query, key, value) in sequences.items():
            chunk_starts = _chunk_starts(steps, sequence) if chunk_exact else None
            expected = _reference(calibration, layer, block_size, query, key, value, exact_blocks,
                                  chunk_starts=chunk_starts)
            torch.testing.assert_close(outputs[layer][sequence], expected, atol=1e-4, rtol=1e-4)


def test_a_wider_window_reads_more_keys_exactly(generator):
    """A test that could fail: at 2 bits, widening the exact window from one block to three must change the
    outputs of queries past the first blocks, and bring them closer to plain attention."""
    rng_seed = int(torch.randint(2**31, (1,), generator=generator))
    query, key, value = _sequences(generator, [40])[0]
    calibration = _calibration([(2, 2)], generator)
    outputs = {
        exact_blocks: _play(random.Random(rng_seed), [[(0, 40)]], {0: (query, key, value)}, calibration, 4,
                            exact_blocks=exact_blocks, chunk_exact=False)[0][0]
        for exact_blocks in (1, 3)
    }
    torch.testing.assert_close(outputs[1][:4], outputs[3][:4])  # the first block: its own window either way
    plain = dense_causal_attention(query, key, value)
    errors = {e: (output[8:] - plain[8:]).abs().mean().item() for e, output in outputs.items()}
    assert errors[3] < errors[1]


@pytest.mark.parametrize("exact_blocks", [2, 3])
def test_under_the_window_rule_a_chunked_prefill_equals_a_one_step_prefill(exact_blocks, generator):
    """Each query reading only its own window exact, chunk boundaries change no number; reading a chunk's own
    tokens exact, they do."""
    rng_seed = int(torch.randint(2**31, (1,), generator=generator))
    chunks = [3, 6, 1, 9, 2, 5]  # boundaries inside and on blocks of 4
    sequences = _sequences(generator, [sum(chunks) + 3])
    calibration = _calibration([(4, 3)], generator)
    chunked = [[(0, n)] for n in chunks] + [[(0, 1)]] * 3
    whole = [[(0, sum(chunks))]] + [[(0, 1)]] * 3
    for chunk_exact in (False, True):
        results = [_play(random.Random(rng_seed), steps, sequences, calibration, 4, exact_blocks=exact_blocks,
                         chunk_exact=chunk_exact)[0][0]
                   for steps in (chunked, whole)]
        if chunk_exact:
            with pytest.raises(AssertionError):
                torch.testing.assert_close(results[0], results[1], atol=1e-5, rtol=1e-5)
        else:
            torch.testing.assert_close(results[0], results[1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("exact_blocks,reused_blocks", [(2, 3), (3, 3), (3, 1), (4, 2)])
@pytest.mark.parametrize("chunk_exact", [True, False])
def test_a_prefix_hit_reads_its_seeded_window_blocks_decoded(exact_blocks, reused_blocks, chunk_exact, generator):
    """Sequence 1 reuses sequence 0's first blocks as a prefix hit would: the reused blocks in its first queries'
    window are seeded decoded into its tail ring (seed_tail), so they read as their codes, its own tokens exact."""
    block_size, prefix_len = 4, reused_blocks * 4
    rng = random.Random(int(torch.randint(2**31, (1,), generator=generator)))
    first, second = _sequences(generator, [prefix_len + 2, prefix_len + 11]).values()
    second = tuple(torch.cat([f[:prefix_len], s[prefix_len:]]) for f, s in zip(first, second))  # shared prefix
    calibration = _calibration([(3, 3), (4, 2)], generator)
    cache = TkvPagedKVCache(calibration, num_blocks=16, block_size=block_size, device="cpu", num_tail_slots=2,
                            exact_blocks=exact_blocks, chunk_exact=chunk_exact)
    runner = PagedStepRunner(block_size=block_size, num_blocks=16, rng=rng)
    backend = TkvTorchPagedAttention()
    _play_on(rng, [[(0, prefix_len + 2)]], {0: first}, cache, runner, backend)
    for tail in (cache.layer(0).key_tail, cache.layer(0).value_tail):
        tail[1].normal_()  # a previous owner's rows
    runner.block_tables[1], runner.processed[1] = runner.block_tables[0][:reused_blocks], prefix_len
    seeded_from = max(0, reused_blocks - exact_blocks + 1)
    cache.seed_tail(1, torch.tensor(runner.block_tables[1][seeded_from:]), seeded_from)
    steps = [[(1, 5)], [(1, 4)], [(1, 1)], [(1, 1)]]
    outputs = _play_on(rng, steps, {1: second}, cache, runner, backend)
    chunk_starts = _chunk_starts(steps, 1, first=prefix_len) if chunk_exact else None
    for layer in range(calibration.num_layers):
        expected = _reference(calibration, layer, block_size, *second, exact_blocks, exact_from=prefix_len,
                              chunk_starts=chunk_starts)
        torch.testing.assert_close(outputs[layer][1], expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("sink_tokens", [0, 1])
def test_k8v8_is_close_to_plain_attention(sink_tokens, generator):
    rng = random.Random(int(torch.randint(2**31, (1,), generator=generator)))
    prompt_lens = [rng.randint(2, 40) for _ in range(3)]
    steps = chunked_schedule(rng, prompt_lens, decode_steps=4)
    sequences = _sequences(generator, [tokens_needed(steps)[s] for s in range(len(prompt_lens))])
    calibration = _calibration([(8, 8), (8, 8)], generator, group_size=32, sink_tokens=sink_tokens)
    outputs = _play(rng, steps, sequences, calibration, block_size=8)
    for layer_outputs in outputs:
        for sequence, (query, key, value) in sequences.items():
            expected = dense_causal_attention(query, key, value)
            error = (layer_outputs[sequence] - expected).abs()
            assert error.mean() < 1e-2 and error.max() < 0.1


def test_low_bits_differ_from_plain_attention_and_sinks_reduce_the_error(generator):
    """A test that could fail: 2-bit codes must visibly perturb attention, and exact sinks must help when the
    first token's key is an outlier (as real models' attention sinks are)."""
    rng = random.Random(int(torch.randint(2**31, (1,), generator=generator)))
    query, key, value = _sequences(generator, [48])[0]
    key[0] *= 8
    value[0] *= 8
    errors = {}
    for sink_tokens in (0, 1):
        calibration = _calibration([(2, 2)], generator, sink_tokens=sink_tokens)
        calibration = TkvCalibration.uniform("tkvfp1:test", calibration.layer_spec(0), 1, KV_HEADS, HEAD_DIM)
        output = _play(rng, [[(0, 48)]], {0: (query, key, value)}, calibration, block_size=16,
                       chunk_exact=False)[0][0]
        errors[sink_tokens] = (output - dense_causal_attention(query, key, value)).abs().mean().item()
    assert errors[0] > 0.1
    assert errors[1] < errors[0]


def test_decode_group_limits_do_not_change_results(generator):
    rng_seed = int(torch.randint(2**31, (1,), generator=generator))
    lengths = [random.Random(rng_seed + i).randint(2, 30) for i in range(9)]
    sequences = _sequences(generator, lengths)
    calibration = _calibration([(4, 4)], generator)
    prefill = [(seq, length - 1) for seq, length in enumerate(lengths)]
    decode = [(seq, 1) for seq in range(len(lengths))]
    results = [
        _play(random.Random(rng_seed), [prefill, decode], sequences, calibration, 4, backend)[0]
        for backend in (TkvTorchPagedAttention(), TkvTorchPagedAttention(3, 40))
    ]
    for sequence in sequences:
        torch.testing.assert_close(results[0][sequence], results[1][sequence])
