"""Argument validation shared by the kernel wrappers.

Every check raises `ValueError` (or `NotImplementedError` for shapes outside what the kernels were built
for) with a message that names the argument, the expected value and the value received.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

FLOAT_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32)
SUPPORTED_HEAD_DIMS: tuple[int, ...] = (16, 32, 64, 128, 256)


def require_shape(name: str, tensor: torch.Tensor, dims: Mapping[str, int | None]) -> None:
    """Check rank and sizes; `dims` maps each dimension's name to its required size (None: any size)."""
    expected = ", ".join(name_ if size is None else f"{name_}={size}" for name_, size in dims.items())
    sizes_match = tensor.dim() == len(dims) and all(
        size is None or actual == size for actual, size in zip(tensor.shape, dims.values())
    )
    if not sizes_match:
        raise ValueError(f"{name}: expected shape [{expected}], got {tuple(tensor.shape)}")


def require_dtype(name: str, tensor: torch.Tensor, allowed: tuple[torch.dtype, ...]) -> None:
    if tensor.dtype not in allowed:
        names = ", ".join(str(dtype).removeprefix("torch.") for dtype in allowed)
        raise ValueError(f"{name}: dtype must be one of ({names}), got {str(tensor.dtype).removeprefix('torch.')}")


def require_same_dtype(name: str, tensor: torch.Tensor, reference_name: str, reference: torch.Tensor) -> None:
    if tensor.dtype != reference.dtype:
        raise ValueError(f"{name}: dtype must match {reference_name} ({reference.dtype}), got {tensor.dtype}")


def require_unit_last_stride(name: str, tensor: torch.Tensor) -> None:
    """The kernels read the last dimension as one contiguous row; other dimensions may be strided."""
    if tensor.dim() > 0 and tensor.shape[-1] > 1 and tensor.stride(-1) != 1:
        raise ValueError(f"{name}: last dimension must be contiguous (stride 1), got strides {tensor.stride()}")


def require_same_device(tensors: Mapping[str, torch.Tensor]) -> None:
    devices = {name: tensor.device for name, tensor in tensors.items()}
    if len(set(devices.values())) > 1:
        listing = ", ".join(f"{name} on {device}" for name, device in devices.items())
        raise ValueError(f"all tensors must be on one device, got {listing}")


def require_head_dim(name: str, head_dim: int) -> None:
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise NotImplementedError(
            f"{name}: head_dim {head_dim} is not supported; the kernels handle head_dim in {SUPPORTED_HEAD_DIMS}"
        )


def require_positive_scale(name: str, value: float) -> None:
    if not value > 0.0 or value == float("inf"):
        raise ValueError(f"{name}: must be a finite positive number, got {value}")


def require_paged_cache(key_cache: torch.Tensor, value_cache: torch.Tensor, dtype: torch.dtype) -> None:
    """K and V caches: [num_blocks, block_size, num_kv_heads, head_dim], identical shapes and strides."""
    require_shape(
        "key_cache", key_cache, {"num_blocks": None, "block_size": None, "num_kv_heads": None, "head_dim": None}
    )
    require_shape("value_cache", value_cache, dict(zip(
        ("num_blocks", "block_size", "num_kv_heads", "head_dim"), key_cache.shape
    )))
    if key_cache.dtype != dtype or value_cache.dtype != dtype:
        raise ValueError(
            f"key_cache/value_cache: dtype must be {dtype}, got {key_cache.dtype} and {value_cache.dtype}"
        )
    if key_cache.stride() != value_cache.stride():
        raise ValueError(
            f"value_cache: strides must equal key_cache's {key_cache.stride()}, got {value_cache.stride()}"
        )
    require_unit_last_stride("key_cache", key_cache)


def next_power_of_two(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


def require_tile_size(name: str, value: int, minimum: int = 16) -> None:
    """Tile extents feed tl.arange and tl.dot: powers of two, at least 16 for tensor-core dots."""
    if value < minimum or value & (value - 1) != 0:
        raise ValueError(f"{name}: must be a power of two >= {minimum}, got {value}")


def require_num_warps(value: int) -> None:
    if value not in (1, 2, 4, 8, 16):
        raise ValueError(f"num_warps: must be one of (1, 2, 4, 8, 16), got {value}")


def float32_output(name: str, out: torch.Tensor | None, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """`out` checked as a float32 tensor of `shape` on `device` with a contiguous last dimension (a row slice of a
    larger output is fine: kernels address it by its strides), or a new one when None."""
    if out is None:
        return torch.empty(shape, dtype=torch.float32, device=device)
    require_dtype(name, out, (torch.float32,))
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(out.shape)}")
    require_unit_last_stride(name, out)
    if out.device != device:
        raise ValueError(f"{name}: must be on {device}, got {out.device}")
    return out
