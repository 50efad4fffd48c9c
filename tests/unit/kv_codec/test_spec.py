"""TkvSpec validation and the memory arithmetic of bytes_per_token."""

from __future__ import annotations

import pytest

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec import SUPPORTED_BITS, TkvSpec, bytes_per_token, head_vector_bytes, sink_bytes_per_sequence


@pytest.mark.parametrize("bits", [0, 1, 7, 9, 16, -4])
def test_unsupported_bits_are_refused_naming_kv_bits(bits: int) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        TkvSpec(key_bits=bits, value_bits=4)
    assert caught.value.field == "kv_bits"
    assert str(bits) in caught.value.description
    with pytest.raises(InvalidArgumentError):
        TkvSpec(key_bits=4, value_bits=bits)


@pytest.mark.parametrize("bits", ["4", 4.0, True, None])
def test_non_integer_bits_are_refused(bits: object) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        TkvSpec(key_bits=bits)  # type: ignore[arg-type]
    assert caught.value.field == "kv_bits"


def test_seven_bits_message_lists_supported_widths() -> None:
    with pytest.raises(InvalidArgumentError, match=r"supported: \[2, 3, 4, 5, 6, 8\]"):
        TkvSpec(key_bits=7)


@pytest.mark.parametrize("group_size", [0, 4, 12, 48, -32])
def test_bad_group_sizes_are_refused(group_size: int) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        TkvSpec(group_size=group_size)
    assert caught.value.field == "kv_group_size"


def test_group_must_divide_head_dim() -> None:
    with pytest.raises(InvalidArgumentError, match="does not divide head_dim 64"):
        head_vector_bytes(64, 4, 128)


@pytest.mark.parametrize("key_bits", SUPPORTED_BITS)
@pytest.mark.parametrize("value_bits", SUPPORTED_BITS)
def test_bytes_per_token_counts_codes_and_fp16_metadata(key_bits: int, value_bits: int) -> None:
    spec = TkvSpec(key_bits, value_bits, group_size=32)
    head_dim, heads = 64, 3
    metadata = 2 * (head_dim // 32) * 4  # K and V: two groups each, fp16 scale + fp16 zero
    expected = heads * (head_dim * (key_bits + value_bits) // 8 + metadata)
    assert bytes_per_token(head_dim, heads, spec) == expected


def test_spec_is_frozen() -> None:
    spec = TkvSpec()
    with pytest.raises(AttributeError):
        spec.key_bits = 8  # type: ignore[misc]


@pytest.mark.parametrize("sink_tokens", [-1, 65, 1.0, True])
def test_bad_sink_prefix_lengths_are_refused(sink_tokens: object) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        TkvSpec(sink_tokens=sink_tokens)  # type: ignore[arg-type]
    assert caught.value.field == "kv_sink_tokens"


def test_sink_prefix_is_fp16_per_sequence() -> None:
    assert TkvSpec().sink_tokens == 1
    assert sink_bytes_per_sequence(64, 3, TkvSpec(sink_tokens=2)) == 2 * 3 * 64 * 2 * 2
    assert sink_bytes_per_sequence(64, 3, TkvSpec(sink_tokens=0)) == 0
