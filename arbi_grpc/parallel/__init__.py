"""Tensor parallelism over `torch.distributed` (gloo on the CPU, NCCL on CUDA): the rank's process group and
collectives (`group`), which weights each rank holds (`shard_plan`), the step inputs rank 0 broadcasts
(`step_broadcast`), the worker ranks' loop (`worker`) and rank 0's launch and watch of them (`launch`).
"""
