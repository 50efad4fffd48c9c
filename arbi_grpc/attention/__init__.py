"""Attention over the paged KV cache: the backend contract and the KV storage protocol it is typed over, each step's
attention metadata, the plain bf16/fp32 paged cache with its torch, Triton and FlashInfer backends, and the choice
of backend and storage from the config (TKV's own storage and backends live in `kv_codec/`).
"""
