"""`load_model`: build the decoder for an HF-style model directory and fill it with its safetensors weights."""

from __future__ import annotations

from pathlib import Path

import torch

from arbi_grpc.attention.backend import AttentionBackend
from arbi_grpc.attention.torch_paged import TorchPagedAttention
from arbi_grpc.errors import ModelLoadError
from arbi_grpc.models.checkpoint_reader import read_checkpoint_tensors, read_hf_config
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.decoder import CausalLM

# Checkpoints written by older transformers versions carry RoPE tables that we recompute.
_RECOMPUTED_SUFFIX = ".rotary_emb.inv_freq"


def load_model(
    model_dir: Path,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    attention_backend: AttentionBackend | None = None,
) -> tuple[CausalLM, ModelConfig]:
    """Read `config.json` and the weights of `model_dir`; returns the model (eval, no grad, projections fused)
    and its config.

    Without `attention_backend`, the torch reference backend tuned for `device` runs attention.
    Raises ModelLoadError for missing, truncated or corrupt files and missing or mis-shaped tensors,
    UnsupportedArchitectureError for architectures outside SUPPORTED_ARCHITECTURES, and NotImplementedError
    for features of a supported architecture that the decoder lacks (e.g. sliding windows, yarn RoPE).
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ModelLoadError(f"{model_dir}: model directory does not exist")
    config = ModelConfig.from_hf_config(read_hf_config(model_dir))
    backend = attention_backend or TorchPagedAttention.for_device(device)

    def is_ignored(name: str) -> bool:
        # A tied checkpoint may still store lm_head.weight; the tie wins, as in transformers.
        return name.endswith(_RECOMPUTED_SUFFIX) or (config.tie_word_embeddings and name == "lm_head.weight")

    def read_weights(expected_shapes: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
        return read_checkpoint_tensors(
            model_dir, expected_shapes=expected_shapes, is_ignored=is_ignored, dtype=dtype, device=device
        )

    return CausalLM.from_weights(config, read_weights, attention_backend=backend, device=device), config
