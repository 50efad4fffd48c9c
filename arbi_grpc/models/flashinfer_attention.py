"""The `--attention-backend flashinfer` option: where it stands.

FlashInfer's paged layout (NHD pages of [page_size, kv_heads, head_dim] per K and V) matches this engine's
`PagedKVCache`, so its batch decode/prefill wrappers can read the cache as it is. The wheel that fits a GPU
host here (flashinfer-python 0.6.13, JIT-compiled) has not been built and validated against our Triton
kernels on the GPU, so the option is refused rather than shipped untested.
"""

from __future__ import annotations

from arbi_grpc.models.attention_backend import AttentionBackend


class FlashInferPagedAttention:
    """Refuses construction with the boundary of what is missing (see the module docstring)."""

    @classmethod
    def create(cls) -> AttentionBackend:
        raise NotImplementedError(
            "attention backend 'flashinfer': not wired; the FlashInfer wrappers over the paged cache need a GPU "
            "build and validation against the Triton kernels that have not been done; use 'triton' (the default "
            "on cuda)"
        )
