"""arbi_kernels: Triton kernels for arbi-serve's GPU fast path, each with a torch reference in `reference`.

Importing this package imports triton; set TRITON_INTERPRET=1 before the import to run on CPU.
"""

from arbi_kernels.activation import silu_and_mul
from arbi_kernels.decode_attention import paged_decode_attention
from arbi_kernels.kv_cache_write import write_kv_cache
from arbi_kernels.norm import rms_norm
from arbi_kernels.prefill_attention import paged_prefill_attention
from arbi_kernels.rotary import HeadNorms, apply_rotary_embedding, build_rotary_cache
from arbi_kernels.tkv_decode_attention import tkv_paged_decode_attention
from arbi_kernels.tkv_prefill_attention import tkv_paged_prefill_attention
from arbi_kernels.tkv_tail import store_tkv_tail
from arbi_kernels.tkv_transforms import tkv_transform_output, tkv_transform_queries
from arbi_kernels.tkv_write import write_tkv_cache

__all__ = [
    "HeadNorms",
    "apply_rotary_embedding",
    "build_rotary_cache",
    "paged_decode_attention",
    "paged_prefill_attention",
    "rms_norm",
    "silu_and_mul",
    "store_tkv_tail",
    "tkv_paged_decode_attention",
    "tkv_paged_prefill_attention",
    "tkv_transform_output",
    "tkv_transform_queries",
    "write_kv_cache",
    "write_tkv_cache",
]
