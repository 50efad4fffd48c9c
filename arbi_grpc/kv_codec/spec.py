"""The TKV codec's configuration: bit widths for keys and values, the quantization group size, the attention-
sink prefix kept unquantized, and the memory a token (and a sequence's sink prefix) costs in a TKV cache."""

from __future__ import annotations

from dataclasses import dataclass

from arbi_grpc.errors import InvalidArgumentError
from arbi_kernels.limits import SUPPORTED_BITS  # shared with the TKV kernels

GROUP_METADATA_BYTES = 4
"""Per group of channels: one fp16 scale and one fp16 zero (the value that code 0 stands for)."""
SINK_ELEMENT_BYTES = 2
"""Sink-prefix keys and values are stored as plain fp16."""
MAX_SINK_TOKENS = 64


def validate_bits(bits: int, field: str = "kv_bits") -> int:
    """Return `bits` when TKV can store it, else raise InvalidArgumentError naming `field`."""
    if isinstance(bits, bool) or not isinstance(bits, int):
        raise InvalidArgumentError(field, f"must be an integer in {list(SUPPORTED_BITS)}, got {bits!r}")
    if not 2 <= bits <= 8:
        raise InvalidArgumentError(field, f"must be between 2 and 8 bits, got {bits}")
    if bits not in SUPPORTED_BITS:
        raise InvalidArgumentError(field, f"{bits} bits is not supported; supported: {list(SUPPORTED_BITS)}")
    return bits


def validate_group_size(group_size: int, head_dim: int | None = None) -> int:
    """Return `group_size` when it is a power of two >= 8 (and divides `head_dim` when given)."""
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise InvalidArgumentError("kv_group_size", f"must be an integer, got {group_size!r}")
    if group_size < 8 or group_size & (group_size - 1):
        raise InvalidArgumentError("kv_group_size", f"must be a power of two >= 8, got {group_size}")
    if head_dim is not None and head_dim % group_size:
        raise InvalidArgumentError(
            "kv_group_size",
            f"{group_size} does not divide head_dim {head_dim}; groups never span two head vectors",
        )
    return group_size


@dataclass(frozen=True)
class TkvSpec:
    """Bits per key channel, bits per value channel, channels per (scale, zero) group, and how many leading
    tokens of every sequence (the attention sink) the cache keeps in fp16 instead of encoding them."""

    key_bits: int = 4
    value_bits: int = 4
    group_size: int = 32
    sink_tokens: int = 1

    def __post_init__(self) -> None:
        validate_bits(self.key_bits)
        validate_bits(self.value_bits)
        validate_group_size(self.group_size)
        validate_sink_tokens(self.sink_tokens)

    def bits_per_channel(self) -> float:
        """Average stored bits per K or V channel, counting the group metadata."""
        metadata_bits = 8 * GROUP_METADATA_BYTES / self.group_size
        return (self.key_bits + self.value_bits) / 2 + metadata_bits


def validate_sink_tokens(sink_tokens: int) -> int:
    """Return `sink_tokens` when it is an integer in [0, MAX_SINK_TOKENS], else raise InvalidArgumentError."""
    if isinstance(sink_tokens, bool) or not isinstance(sink_tokens, int) or not 0 <= sink_tokens <= MAX_SINK_TOKENS:
        raise InvalidArgumentError(
            "kv_sink_tokens", f"must be an integer in [0, {MAX_SINK_TOKENS}], got {sink_tokens!r}"
        )
    return sink_tokens


def head_vector_bytes(head_dim: int, bits: int, group_size: int) -> int:
    """Bytes one encoded head vector takes: densely packed codes plus per-group fp16 scale and zero."""
    validate_group_size(group_size, head_dim)
    if head_dim % 8:
        raise InvalidArgumentError("head_dim", f"TKV packs whole bytes and needs head_dim % 8 == 0, got {head_dim}")
    return head_dim * validate_bits(bits) // 8 + (head_dim // group_size) * GROUP_METADATA_BYTES


def bytes_per_token(head_dim: int, num_kv_heads: int, spec: TkvSpec) -> int:
    """Bytes one encoded token's keys and values take in ONE layer of a TKV cache (multiply by the layer count;
    the sink prefix is extra, see sink_bytes_per_sequence)."""
    if num_kv_heads < 1:
        raise InvalidArgumentError("num_kv_heads", f"must be >= 1, got {num_kv_heads}")
    per_head = head_vector_bytes(head_dim, spec.key_bits, spec.group_size) + head_vector_bytes(
        head_dim, spec.value_bits, spec.group_size
    )
    return num_kv_heads * per_head


def sink_bytes_per_sequence(head_dim: int, num_kv_heads: int, spec: TkvSpec) -> int:
    """Bytes one sequence's fp16 sink prefix (keys and values) takes in ONE layer."""
    return spec.sink_tokens * num_kv_heads * head_dim * 2 * SINK_ELEMENT_BYTES
