"""Estimates a server's memory budget from the model's config and the engine config alone, without
loading weights or importing torch: what `arbi-serve plan` prints and what a boot checks before loading.

Weights and the KV cache are exact (parameter count and pool size). Activations model the step that the
boot profiles (`activation_profile.py`): the larger of the forward pass (residual stream plus the MLP's or
attention's transients, with the chunk that block-quantized CPU weights dequantize for a batch:
`quantized_layout.dequantize_scratch_bytes`) and the logits phase (logits of every token, then the sampler's
working set). On CUDA the forward pass, the CUDA graph pool and the allocator's slack come from `cuda_estimate.py`.
"""

from __future__ import annotations

from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.memory.budget import (
    MemoryBudget,
    MemoryComponent,
    MemoryLimit,
    activations_component,
    allocator_overhead_component,
    codec_scratch_component,
    cuda_graphs_component,
    kv_cache_component,
    weights_component,
)
from arbi_grpc.engine.graph_batches import graph_batch_sizes
from arbi_grpc.memory.cuda_estimate import (
    CUBLAS_WORKSPACE_BYTES,
    FUSION_FRAGMENTATION_FRACTION,
    allocator_slack_bytes,
    cuda_forward_bytes,
    cuda_graph_pool_bytes,
    rope_table_bytes,
)
from arbi_grpc.memory.kv_pool import ELEMENT_BYTES, KVPoolPlan
from arbi_grpc.memory.profile_step import ProfileStep
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.quantized_layout import cpu_weight_bytes, cpu_weight_form, dequantize_scratch_bytes, int8_kinds

LOGITS_BYTES = 4  # logits, log-probabilities and sampling run in float32 whatever the model's dtype
# Measured on engine/sampler.py's heaviest path (penalties, top-k/top-p/min-p, 20 top log-probabilities):
# at its peak the sampler holds 13 float32 [rows, vocab] tensors plus 3 vocabulary-sized vectors.
SAMPLER_ROW_COPIES = 13
SAMPLER_VOCAB_VECTORS = 3
# Around a fused add + norm a decoder layer holds the residual stream, the layer output added to it, their sum,
# its normalised copy and the norm's temporaries (fitted to the profile: tests/unit/memory/test_estimate.py).
RESIDUAL_COPIES = 6
# The SwiGLU MLP holds the fused gate|up product ([tokens, 2 x intermediate]) and silu(gate) * up beside it (the
# CPU kernel's output; torch's ops, its fallback, work in place and take one copy less).
MLP_COPIES = 3
# TKV keeps a scale and a shift for keys and for values per layer (docs/tkv.md).
TKV_TRANSFORMS_PER_LAYER = 4


def parameter_count(model: ModelConfig) -> int:
    """Parameters of the decoder `models/decoder.py` builds for `model` (tied embeddings counted once)."""
    hidden = model.hidden_size
    query_width, kv_width = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    attention = hidden * query_width + 2 * hidden * kv_width + query_width * hidden
    if model.attention_bias:
        attention += query_width + 2 * kv_width
    if model.output_projection_bias:
        attention += hidden
    if model.qk_norm:
        attention += 2 * model.head_dim
    layer = attention + 3 * hidden * model.intermediate_size + 2 * hidden
    embeddings = model.vocab_size * hidden * (1 if model.tie_word_embeddings else 2)
    return embeddings + model.num_layers * layer + hidden


def activation_bytes(
    model: ModelConfig, dtype: str, step: ProfileStep, device: str = "cpu", attention_backend: str = "torch",
    weight_scratch: int = 0,
) -> int:
    """Peak tensor bytes of `step`, as the boot's profile measures them on `device`; `weight_scratch` is what a
    matmul holds beside its operands (dequantized chunks of block-quantized weights)."""
    if device == "cuda":
        forward = cuda_forward_bytes(model, dtype, step.num_tokens, step.longest_prompt, attention_backend)
    else:
        forward = _cpu_forward_bytes(model, dtype, step)
    return max(forward + weight_scratch, logits_phase_bytes(model, dtype, step))


def _cpu_forward_bytes(model: ModelConfig, dtype: str, step: ProfileStep) -> int:
    element = ELEMENT_BYTES[dtype]
    tokens, hidden = step.num_tokens, model.hidden_size
    query_width, kv_width = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    longest = step.longest_prompt
    mlp = MLP_COPIES * tokens * model.intermediate_size * element
    # The fused q|k|v product (alive while v, a view of it, is), rotated q and k, and the attended output;
    # one prompt's gathered K/V context and its causal masks (bool, one plus one per query group).
    attention = (
        3 * tokens * (query_width + kv_width) * element
        + 2 * longest * kv_width * element
        + longest * longest * (1 + model.num_query_groups)
    )
    return RESIDUAL_COPIES * tokens * hidden * element + max(mlp, attention)


def logits_phase_bytes(model: ModelConfig, dtype: str, step: ProfileStep) -> int:
    """The logits of every token in float32, then the larger of their narrower copy before the cast and the
    sampler's working set."""
    element = ELEMENT_BYTES[dtype]
    tokens = step.num_tokens
    logits = tokens * model.vocab_size * LOGITS_BYTES
    # Before the float32 cast the logits also exist in the model's dtype, when that is narrower.
    cast = tokens * model.vocab_size * element if element < LOGITS_BYTES else 0
    sampler = (SAMPLER_ROW_COPIES * step.num_sampled_rows + SAMPLER_VOCAB_VECTORS) * model.vocab_size * LOGITS_BYTES
    return 2 * tokens * model.hidden_size * element + logits + max(cast, sampler)


def estimate_budget(
    config: EngineConfig, model: ModelConfig, kv_pool: KVPoolPlan, limit: MemoryLimit,
    host_components: tuple[MemoryComponent, ...] = (),
) -> MemoryBudget:
    """The budget a boot of `config` would measure, from config files only. `host_components` are the server's
    other residents in host memory (the audio models), counted when the engine's device is the CPU too."""
    count = parameter_count(model)
    element = ELEMENT_BYTES[config.dtype]
    weight_bytes, weight_detail = count * element, f"{count:,} parameters x {element} bytes ({config.dtype})"
    cpu_weights = cpu_weight_form(config.cpu_weights, config.device, config.tensor_parallel_size, model)
    if config.device == "cpu" and cpu_weights == "int4" and model.quantized_matrices:  # `quantized_layout`
        weight_bytes = cpu_weight_bytes(model, dict(model.quantized_matrices), element)
        weight_detail = (f"{count:,} parameters, {len(model.quantized_matrices)} matrices block-quantized, the rest "
                         f"{element} bytes ({config.dtype})")
    elif config.device == "cpu" and cpu_weights == "int8":
        kinds = int8_kinds(model)
        weight_bytes = cpu_weight_bytes(model, kinds, element)
        weight_detail = (f"{count:,} parameters, {len(kinds)} layer matrices int8 with a bfloat16 scale per row, "
                         f"the rest {element} bytes ({config.dtype})")
    # An unresolved (auto) limit counts the most it may become: a model still to load is not underestimated.
    step = ProfileStep.worst_case(config.max_step_tokens, kv_pool.max_model_len, config.max_running_requests_bound)
    scratch = 0
    if config.device == "cpu" and cpu_weights == "int4":
        scratch = dequantize_scratch_bytes(model, dict(model.quantized_matrices), step.num_tokens)
    activations = activation_bytes(model, config.dtype, step, config.device, config.attention_backend, scratch)
    components = [
        weights_component(weight_bytes, weight_detail),
        kv_cache_component(kv_pool.num_bytes, kv_pool.detail),
        codec_scratch_component(codec_scratch_bytes(config, model), codec_detail(config)),
        activations_component(activations, step_detail(step)),
    ]
    if config.device == "cuda":
        graph_batches = graph_batch_sizes(config.cuda_graph_batch)
        components += [
            cuda_graphs_component(
                cuda_graph_pool_bytes(model, config),
                f"{len(graph_batches)} decode graphs, batches up to {graph_batches[-1]}" if graph_batches
                else "CUDA graphs off (--cuda-graph-max-batch 0)",
            ),
            allocator_overhead_component(
                allocator_slack_bytes(model, weight_bytes),
                f"cuBLAS workspace {CUBLAS_WORKSPACE_BYTES // MIB} MiB + RoPE tables "
                f"{rope_table_bytes(model) / MIB:.1f} MiB + {FUSION_FRAGMENTATION_FRACTION:.0%} of the weights "
                "(segments split by the projection fusion at load)",
            ),
        ]
    if config.device == "cpu":
        components += host_components
    return MemoryBudget(device=config.device, method="estimated", components=tuple(components), limit=limit)


def codec_scratch_bytes(config: EngineConfig, model: ModelConfig) -> int:
    """What the KV codec keeps outside the pool's blocks: TKV's per-layer transforms (scale and shift of keys
    and of values, float32 [kv_heads, head_dim] each); nothing without a codec."""
    if config.kv_cache_dtype != "tkv":
        return 0
    return TKV_TRANSFORMS_PER_LAYER * model.num_layers * model.num_kv_heads * model.head_dim * 4


def codec_detail(config: EngineConfig) -> str:
    if config.kv_cache_dtype != "tkv":
        return f"no KV codec (KV cache in {config.kv_cache_dtype})"
    return f"TKV per-layer transforms ({TKV_TRANSFORMS_PER_LAYER} float32 [kv_heads, head_dim] tensors per layer)"


def step_detail(step: ProfileStep) -> str:
    return (f"step of {step.num_tokens} tokens in {len(step.prompt_lengths)} prompt(s), "
            f"{step.num_sampled_rows} sampled rows")
