"""TkvTorchPagedAttention against the codec's reference attention (same codes, exact sinks and own blocks) and
against plain attention (K8V8), over prefill chunks, ragged batches with decodes, sinks on and off, per-layer
bits."""

from __future__ import annotations

import random

import pytest
import torch

from arbi_grpc.kv_codec import TkvCalibration
from arbi_grpc.kv_codec.attention import rotated_space_attention
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache
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
) -> list[dict[int, torch.Tensor]]:
    """Each step through every layer (in random order); returns per layer {sequence: outputs of its tokens}."""
    backend = backend or TkvTorchPagedAttention()
    num_blocks = sum(-(-len(q) // block_size) for q, _, _ in sequences.values()) + 3
    cache = TkvPagedKVCache(calibration, num_blocks=num_blocks, block_size=block_size, device="cpu",
                            num_tail_slots=len(sequences))
    runner = PagedStepRunner(block_size=block_size, num_blocks=num_blocks, rng=rng)
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
    return [{seq: torch.cat(parts) for seq, parts in layer.items()} for layer in outputs]


def _exact_rotated(codec, transform, x: torch.Tensor) -> torch.Tensor:
    """x [N, Hkv, D] as the cache keeps it exactly, fp16 in the code space (H x - m) * s, back in the rotated
    space H x."""
    stored = transform.forward(codec.into_rotated_space(x.float())).half().float()
    return transform.inverse(stored)


def _reference(calibration: TkvCalibration, layer: int, block_size: int, query, key, value) -> torch.Tensor:
    """Token by token: query t over keys 0..t, the first sink_tokens and those of t's own block exact (fp16 in
    the code space), the others decoded from their codes."""
    codec = calibration.layer_codec(layer)
    keys = codec.decode_keys_rotated(codec.encode_keys(key))  # [L, Hkv, D] rotated space
    values = codec.decode_values_rotated(codec.encode_values(value))
    exact_keys, exact_values = _exact_rotated(codec, codec.keys, key), _exact_rotated(codec, codec.values, value)
    rows = []
    for t in range(query.shape[0]):
        exact = torch.zeros(t + 1, dtype=torch.bool)
        exact[: calibration.sink_tokens] = True
        exact[t // block_size * block_size:] = True
        row_keys = torch.where(exact[:, None, None], exact_keys[: t + 1], keys[: t + 1])
        row_values = torch.where(exact[:, None, None], exact_values[: t + 1], values[: t + 1])
        rows.append(rotated_space_attention(query[t : t + 1], row_keys, row_values, codec, causal=True))
    return torch.cat(rows)


@pytest.mark.parametrize("block_size", [4, 16])
@pytest.mark.parametrize("sink_tokens", [0, 1, 3])
def test_chunked_ragged_batches_match_the_codec_reference(block_size, sink_tokens, generator):
    rng = random.Random(int(torch.randint(2**31, (1,), generator=generator)))
    prompt_lens = [rng.randint(2, 24) for _ in range(4)] + [1]
    steps = chunked_schedule(rng, prompt_lens, decode_steps=3)
    sequences = _sequences(generator, [tokens_needed(steps)[s] for s in range(len(prompt_lens))])
    calibration = _calibration([(8, 8), (4, 3), (3, 2)], generator, sink_tokens=sink_tokens)
    outputs = _play(rng, steps, sequences, calibration, block_size, TkvTorchPagedAttention(max_decode_group_size=2))
    for layer in range(calibration.num_layers):
        for sequence, (query, key, value) in sequences.items():
            expected = _reference(calibration, layer, block_size, query, key, value)
            torch.testing.assert_close(outputs[layer][sequence], expected, atol=1e-4, rtol=1e-4)


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
        output = _play(rng, [[(0, 48)]], {0: (query, key, value)}, calibration, block_size=16)[0][0]
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
