"""Estimates, from config files alone (no torch), the parts of a CUDA server's budget that differ from the
CPU's: the forward pass's transients under the CUDA kernels, the CUDA graph pool, and what torch's caching
allocator reserves beyond the tensors (its slack).

Allocator facts used here (torch's CUDA caching allocator): requests up to 1 MiB are served from 2 MiB
segments, larger ones are rounded up to 2 MiB multiples (those under 10 MiB share 20 MiB segments); cuBLAS
gets a workspace of 32 MiB on Hopper (CUBLAS_WORKSPACE_CONFIG=:4096:8) through the allocator, once per
stream that runs a matmul. Decode graphs (`engine/cuda_graphs.py`: forward pass and float32 logits) are
captured into one private pool, largest batch first, so the pool holds the transients of the largest captured
batch plus the logits every captured graph keeps.
"""

from __future__ import annotations

from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.engine.graph_batches import graph_batch_sizes
from arbi_grpc.memory.kv_pool import ELEMENT_BYTES
from arbi_grpc.models.config import ModelConfig

CUBLAS_WORKSPACE_BYTES = 32 * MIB
SMALL_SEGMENT_BYTES = 2 * MIB
LARGE_ROUNDING_BYTES = 2 * MIB
# The load fuses q|k|v and gate|up into new tensors and frees the parts; the next allocations split those freed
# segments, and the split segments stay reserved after empty_cache. Assumed share of the weights, to be held
# against tests/gpu/test_memory_budget_8b.py.
FUSION_FRAGMENTATION_FRACTION = 0.02
# Under the fused add + RMSNorm kernel a layer holds its input, the residual stream, their sum and its norm.
CUDA_RESIDUAL_COPIES = 4
# The fused gate|up product ([tokens, 2 x intermediate]) and silu_and_mul's output ([tokens, intermediate]).
CUDA_MLP_COPIES = 3
# Beside the fused q|k|v product (RoPE rotates q and k in place on CUDA), attention holds its output ([tokens,
# query width]) until the output projection has read it.
ATTENDED_OUTPUT_COPIES = 1
# Qwen3's per-head q/k RMSNorm runs in torch on [tokens, heads, head_dim] and holds two float32 copies of q.
QK_NORM_FLOAT32_QUERY_COPIES = 2
LOGITS_BYTES = 4  # a graph returns float32 logits
# Every stream that runs a matmul keeps a cuBLAS workspace for good. `DecodeGraphs.capture` warms every batch
# size up on one side stream and captures on torch.cuda.graph's capture stream.
CAPTURE_STREAMS = 2


def cuda_forward_bytes(model: ModelConfig, dtype: str, tokens: int, longest_prompt: int, attention_backend: str) -> int:
    """Peak transients of one forward pass over `tokens` tokens on CUDA: the residual stream plus the larger of
    the MLP and attention. Only the torch backend gathers a prompt's K/V context and builds causal masks."""
    element = ELEMENT_BYTES[dtype]
    query_width, kv_width = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    mlp = CUDA_MLP_COPIES * tokens * model.intermediate_size * element
    attention = tokens * (query_width + 2 * kv_width + ATTENDED_OUTPUT_COPIES * query_width) * element
    if model.qk_norm:
        attention += QK_NORM_FLOAT32_QUERY_COPIES * tokens * query_width * 4
    if attention_backend == "torch":
        attention += 2 * longest_prompt * kv_width * element + longest_prompt**2 * (1 + model.num_query_groups)
    return CUDA_RESIDUAL_COPIES * tokens * model.hidden_size * element + max(mlp, attention)


def cuda_graph_pool_bytes(model: ModelConfig, config: EngineConfig) -> int:
    """What capturing the decode graphs reserves: the logits every graph keeps, the largest batch's transients
    (the larger of its forward pass and its logits in the model's dtype before the cast), and the cuBLAS
    workspaces of the warm-up and capture streams."""
    sizes = graph_batch_sizes(config.cuda_graph_batch)
    if not sizes:
        return 0
    largest = sizes[-1]
    element = ELEMENT_BYTES[config.dtype]
    kept_logits = sum(sizes) * model.vocab_size * LOGITS_BYTES
    forward = cuda_forward_bytes(model, config.dtype, largest, 1, config.attention_backend)
    narrow_logits = largest * (model.vocab_size + model.hidden_size) * element if element < LOGITS_BYTES else 0
    pool = _round_up(kept_logits + max(forward, narrow_logits), LARGE_ROUNDING_BYTES) + SMALL_SEGMENT_BYTES
    return pool + CAPTURE_STREAMS * CUBLAS_WORKSPACE_BYTES


def allocator_slack_bytes(model: ModelConfig, weight_bytes: int) -> int:
    """Reserved beyond the components: the main stream's cuBLAS workspace, RoPE's cos/sin tables (built on the
    first forward pass), and the segments left split by the load's projection fusion."""
    return CUBLAS_WORKSPACE_BYTES + rope_table_bytes(model) + int(FUSION_FRAGMENTATION_FRACTION * weight_bytes)


def rope_table_bytes(model: ModelConfig) -> int:
    """The float32 cos and sin tables [max_positions, head_dim / 2] the CUDA RoPE kernel reads."""
    return 2 * model.max_position_embeddings * (model.head_dim // 2) * 4


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
