"""Random-weight models of real shapes, built directly on the device without a checkpoint: for benchmarks
and GPU tests of speed and memory, never for output quality.

Weights are drawn like a freshly initialised HF model (`initializer_range` 0.02: linear and embedding
weights N(0, 0.02^2), biases 0, norm weights 1), so activations have a realistic scale. The tensors are
allocated one per checkpoint tensor, in checkpoint order, then the projections are fused
(`CausalLM.from_weights`, as for a checkpoint), so the device allocator sees the allocation pattern of a real load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from arbi_grpc.attention.backend import AttentionBackend
from arbi_grpc.attention.torch_paged import TorchPagedAttention
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.decoder import CausalLM
from arbi_grpc.models.reference_shapes import model_config_for_shape

__all__ = ["INITIALIZER_STD", "model_config_for_shape", "random_causal_lm", "write_random_checkpoint"]

INITIALIZER_STD = 0.02  # HF's initializer_range for Llama, Qwen2 and Qwen3


def random_causal_lm(
    model_config: ModelConfig,
    dtype: torch.dtype,
    device: torch.device | str,
    seed: int,
    attention_backend: AttentionBackend | None = None,
) -> CausalLM:
    """A CausalLM of `model_config` in `dtype` on `device` with seeded random weights (eval, no grad).

    Without `attention_backend`, the torch reference backend tuned for `device` runs attention.
    """
    device = torch.device(device)
    backend = attention_backend or TorchPagedAttention.for_device(device)
    generator = torch.Generator(device=device).manual_seed(seed)

    def read_weights(shapes: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
        return {name: _random_tensor(name, shape, dtype, device, generator) for name, shape in shapes.items()}

    return CausalLM.from_weights(model_config, read_weights, attention_backend=backend, device=device)


def write_random_checkpoint(hf_config: dict[str, Any], directory: Path, dtype: torch.dtype, seed: int,
                            device: torch.device | str = "cpu") -> Path:
    """Writes an HF-style checkpoint of `hf_config` with seeded random weights into `directory`: config.json and
    one model.safetensors (tensors drawn on `device`, saved from the host). No tokenizer is written."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    config = ModelConfig.from_hf_config(hf_config)
    with torch.device("meta"):
        shapes = {name: tuple(t.shape) for name, t in
                  CausalLM(config, attention_backend=TorchPagedAttention.for_device(torch.device("cpu")),
                           device="cpu").state_dict().items()}
    generator = torch.Generator(device=device).manual_seed(seed)
    tensors = {name: _random_tensor(name, shape, dtype, torch.device(device), generator).cpu()
               for name, shape in shapes.items()}
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    dtype_name = str(dtype).removeprefix("torch.")
    (directory / "config.json").write_text(json.dumps({**hf_config, "torch_dtype": dtype_name}, indent=2))
    return directory


def _random_tensor(
    name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, generator: torch.Generator
) -> torch.Tensor:
    if name.endswith("norm.weight"):  # input/post-attention/final norms and Qwen3's q/k norms
        return torch.ones(shape, dtype=dtype, device=device)
    if name.endswith(".bias"):
        return torch.zeros(shape, dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device).normal_(0.0, INITIALIZER_STD, generator=generator)
