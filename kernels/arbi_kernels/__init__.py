"""arbi_kernels: Triton kernels for arbi-serve's GPU fast path (their torch references are in tests/kernels/).

Importing the package imports neither torch nor triton: a kernel's module (and with it triton) loads on the first
use of its name (`from arbi_kernels import rms_norm`), and `limits` holds the TKV bounds the engine shares.
Set TRITON_INTERPRET=1 before the first kernel loads to run the kernels on CPU (triton reads it then).
"""

from __future__ import annotations

import importlib

# Each exported name -> the module that defines it.
_EXPORTS = {
    "silu_and_mul": "activation",
    "paged_decode_attention": "decode_attention",
    "write_kv_cache": "kv_cache_write",
    "rms_norm": "norm",
    "paged_prefill_attention": "prefill_attention",
    "HeadNorms": "rotary",
    "apply_rotary_embedding": "rotary",
    "build_rotary_cache": "rotary",
    "tkv_paged_decode_attention": "tkv_decode_attention",
    "tkv_paged_prefill_attention": "tkv_prefill_attention",
    "store_tkv_tail": "tkv_tail",
    "tkv_transform_output": "tkv_transforms",
    "tkv_transform_queries": "tkv_transforms",
    "write_tkv_cache": "tkv_write",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'arbi_kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"arbi_kernels.{module}"), name)
    globals()[name] = value
    return value
