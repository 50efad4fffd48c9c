"""Memory accounting: the budget a server needs (weights, KV cache, codec scratch, activations; on CUDA also
CUDA graphs and the allocator's overhead), how it is sized from the config, estimated without weights
(`plan`), measured at boot, and checked against the memory available.

`kv_pool`, `budget`, `estimate`, `cuda_estimate`, `limits` and `model_source` import no torch, so
`arbi-serve plan` runs without it; `measure` and `activation_profile` work on the loaded model.
"""
