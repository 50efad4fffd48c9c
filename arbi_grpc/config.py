"""The engine's configuration: one frozen dataclass, validated at construction.

CLI flags map one-to-one onto these fields; derived values are properties.
"""

from __future__ import annotations

from dataclasses import dataclass

from arbi_grpc.errors import InvalidArgumentError

MIB = 1024 * 1024


@dataclass(frozen=True)
class EngineConfig:
    """How the engine sizes its KV cache, batches and queues."""

    # Model spec: a known model name, an HF-style directory, or a .gguf file.
    model: str = "SmolLM2-135M-Instruct"
    # "cpu" or "cuda".
    device: str = "cpu"
    # Weights and activations dtype: "float32" or "bfloat16".
    dtype: str = "float32"
    # Tokens per KV cache block.
    block_size: int = 16
    # Memory given to the KV cache pool.
    kv_cache_memory_mib: int = 1024
    # Longest sequence (prompt + output) served; 0 means the model's own context length.
    max_model_len: int = 0
    # Most sequences in the running batch.
    max_running_requests: int = 64
    # Per-step token budget shared by prefill chunks and decodes.
    max_step_tokens: int = 512
    # Most requests waiting for admission; beyond it submissions get RESOURCE_EXHAUSTED.
    max_waiting_requests: int = 256
    # Output length used when a request sets none.
    default_max_output_tokens: int = 1024
    # CPU threads used by torch in the engine loop; 0 keeps torch's default.
    torch_threads: int = 0

    def __post_init__(self) -> None:
        positive = {
            "block_size": self.block_size,
            "kv_cache_memory_mib": self.kv_cache_memory_mib,
            "max_running_requests": self.max_running_requests,
            "max_step_tokens": self.max_step_tokens,
            "max_waiting_requests": self.max_waiting_requests,
            "default_max_output_tokens": self.default_max_output_tokens,
        }
        for name, value in positive.items():
            if value <= 0:
                raise InvalidArgumentError(name, f"must be > 0, got {value}")
        if self.max_model_len < 0:
            raise InvalidArgumentError("max_model_len", f"must be >= 0, got {self.max_model_len}")
        if self.torch_threads < 0:
            raise InvalidArgumentError("torch_threads", f"must be >= 0, got {self.torch_threads}")
        if self.device not in ("cpu", "cuda"):
            raise InvalidArgumentError("device", f"must be 'cpu' or 'cuda', got {self.device!r}")
        if self.dtype not in ("float32", "bfloat16"):
            raise InvalidArgumentError("dtype", f"must be 'float32' or 'bfloat16', got {self.dtype!r}")
        if self.device == "cuda":
            raise NotImplementedError(
                "device 'cuda': the CUDA engine path (Triton attention, CUDA graphs) is not wired yet; "
                "serve on 'cpu'"
            )

    @property
    def kv_cache_memory_bytes(self) -> int:
        return self.kv_cache_memory_mib * MIB
