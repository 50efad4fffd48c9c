"""The decoder-only language model shared by the Llama, Qwen2 and Qwen3 architectures, run on a flattened
varlen batch over the paged KV cache: RMSNorm, the SwiGLU MLP, grouped-query attention with RoPE, the decoder
layer and the whole model. Module and parameter names match HF checkpoints (`model.layers.N...`).

Kernels are chosen once, when the model is built (`decoder_ops.decoder_ops_for`: the torch reference, or the
Triton kernels on CUDA), and attention runs through the `AttentionBackend` given at construction. Build a model
with weights through `CausalLM.from_weights` (the checkpoint loader and random weights do), which fuses the
q/k/v and gate/up projections into single matmuls once the weights are in place.

Under tensor parallelism (`arbi_grpc.parallel`) the model holds one rank's part: its share of the heads, KV heads,
intermediate size and vocabulary (`TensorParallelGroup.split`), with an all-reduce after the attention output and
MLP down projections; `SINGLE_RANK`, the default, makes those the identity.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from arbi_grpc.attention.backend import AttentionBackend
from arbi_grpc.attention.kv_storage import KVStorage
from arbi_grpc.attention.metadata import AttentionMetadata
from arbi_grpc.models.config import Llama3RopeScaling, ModelConfig
from arbi_grpc.models.block_linear import BlockEmbedding, BlockLinear
from arbi_grpc.models.block_linear_int8_dot import Int8DotLinear
from arbi_grpc.models.decoder_ops import DecoderOps, HeadNormWeights, Rotation, decoder_ops_for
from arbi_grpc.models.int8_weights import Int8Linear, Int8Weight
from arbi_grpc.models.quantized_weights import QuantizedWeight, concatenate
from arbi_grpc.parallel.group import SINGLE_RANK, TensorParallelGroup

# Reads the model's tensors (float, or block-quantized or int8 on the CPU) given their names and shapes:
# `CausalLM.from_weights`.
WeightReader = Callable[[dict[str, tuple[int, ...]]], dict[str, "Tensor | QuantizedWeight | Int8Weight"]]
QUANTIZED_TYPES = (QuantizedWeight, Int8Weight)


class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last axis, computed in float32 like the HF reference."""

    def __init__(self, size: int, eps: float, ops: DecoderOps) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        self.ops = ops

    def forward(self, states: Tensor) -> Tensor:
        return self.ops.rms_norm(states, self.weight, self.eps)

    def add_and_norm(self, states: Tensor, residual: Tensor) -> tuple[Tensor, Tensor]:
        """(norm(states + residual), states + residual): the residual stream's next value and its norm."""
        return self.ops.add_rms_norm(states, residual, self.weight, self.eps)


class SwiGLUMLP(nn.Module):
    """down(silu(gate(x)) * up(x)), bias-free, with HF parameter names.

    After `fuse_projections` the gate and up weights are one [2I, H] matrix, multiplied at once.
    """

    def __init__(self, hidden_size: int, intermediate_size: int, ops: DecoderOps,
                 tensor_parallel: TensorParallelGroup = SINGLE_RANK) -> None:
        super().__init__()
        intermediate_size = tensor_parallel.split(intermediate_size)
        self.tensor_parallel = tensor_parallel
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.gate_up: LinearOp | None = None
        self.down: LinearOp | None = None
        self.ops = ops

    def fuse_projections(self) -> None:
        self.gate_up = fused_linear(self.ops, self.gate_proj, self.up_proj)
        self.down = fused_linear(self.ops, self.down_proj)

    def forward(self, states: Tensor) -> Tensor:
        if self.gate_up is None or self.down is None:
            raise RuntimeError("SwiGLUMLP: call CausalLM.fuse_projections() once the weights are loaded")
        gate_up = self.gate_up(states)  # [T, 2I]
        return self.tensor_parallel.all_reduce(self.down(self.ops.silu_and_mul(gate_up)))


class DecoderAttention(nn.Module):
    """Grouped-query self-attention of one layer: q/k/v projections (optional bias), optional per-head q/k
    RMSNorm (Qwen3), RoPE, paged attention through the backend, and the output projection."""

    def __init__(self, config: ModelConfig, layer_index: int, backend: AttentionBackend, ops: DecoderOps,
                 tensor_parallel: TensorParallelGroup = SINGLE_RANK) -> None:
        super().__init__()
        self.layer_index = layer_index
        self.backend = backend
        self.ops = ops
        self.tensor_parallel = tensor_parallel
        self.num_heads = tensor_parallel.split(config.num_heads)
        self.num_kv_heads = tensor_parallel.split(config.num_kv_heads)
        self.head_dim = config.head_dim
        query_width = self.num_heads * config.head_dim
        kv_width = self.num_kv_heads * config.head_dim
        self.q_proj = nn.Linear(config.hidden_size, query_width, bias=config.attention_bias)
        self.k_proj = nn.Linear(config.hidden_size, kv_width, bias=config.attention_bias)
        self.v_proj = nn.Linear(config.hidden_size, kv_width, bias=config.attention_bias)
        self.o_proj = nn.Linear(query_width, config.hidden_size, bias=config.output_projection_bias)
        self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps, ops) if config.qk_norm else None
        self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps, ops) if config.qk_norm else None
        self.qkv: LinearOp | None = None
        self.output: LinearOp | None = None

    def fuse_projections(self) -> None:
        """Multiply q, k and v in one matmul, by one [(H + 2 Hkv) D, hidden] matrix."""
        self.qkv = fused_linear(self.ops, self.q_proj, self.k_proj, self.v_proj)
        self.output = fused_linear(self.ops, self.o_proj)

    def forward(
        self, states: Tensor, rotation: Rotation, metadata: AttentionMetadata, kv_cache: KVStorage,
        attention: AttentionBackend | None = None,
    ) -> Tensor:
        if self.qkv is None or self.output is None:
            raise RuntimeError("DecoderAttention: call CausalLM.fuse_projections() once the weights are loaded")
        num_tokens = states.shape[0]
        query_width = self.num_heads * self.head_dim
        kv_width = self.num_kv_heads * self.head_dim
        qkv = self.qkv(states)  # [T, (H + 2 Hkv) D]
        query = qkv[:, :query_width].view(num_tokens, self.num_heads, self.head_dim)  # [T, H, D]
        key = qkv[:, query_width: query_width + kv_width].view(num_tokens, self.num_kv_heads, self.head_dim)
        value = qkv[:, query_width + kv_width:].view(num_tokens, self.num_kv_heads, self.head_dim)  # [T, Hkv, D]
        head_norms = None
        if self.q_norm is not None and self.k_norm is not None:
            head_norms = HeadNormWeights(self.q_norm.weight, self.k_norm.weight, self.q_norm.eps)
        query, key = rotation.apply(query, key, head_norms)
        backend = attention or self.backend
        attended = backend.forward(self.layer_index, query, key, value, metadata, kv_cache)  # [T, H, D]
        attended = attended.reshape(num_tokens, self.num_heads * self.head_dim)
        return self.tensor_parallel.all_reduce(self.output(attended))


class DecoderLayer(nn.Module):
    """Pre-norm residual block: attention, then SwiGLU MLP."""

    def __init__(self, config: ModelConfig, layer_index: int, backend: AttentionBackend, ops: DecoderOps,
                 tensor_parallel: TensorParallelGroup = SINGLE_RANK) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, ops)
        self.self_attn = DecoderAttention(config, layer_index, backend, ops, tensor_parallel)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, ops)
        self.mlp = SwiGLUMLP(config.hidden_size, config.intermediate_size, ops, tensor_parallel)

    def forward(
        self,
        states: Tensor,
        residual: Tensor | None,
        rotation: Rotation,
        metadata: AttentionMetadata,
        kv_cache: KVStorage,
        attention: AttentionBackend | None = None,
    ) -> tuple[Tensor, Tensor]:
        """(this layer's MLP output, the residual stream before it): the next layer adds the two (fused into
        its input norm), so the stream is `states + residual` between layers. The first layer has no residual.
        """
        if residual is None:
            residual, normed = states, self.input_layernorm(states)
        else:
            normed, residual = self.input_layernorm.add_and_norm(states, residual)
        attended = self.self_attn(normed, rotation, metadata, kv_cache, attention)
        normed, residual = self.post_attention_layernorm.add_and_norm(attended, residual)
        return self.mlp(normed), residual


def _embedding(rows: int, width: int) -> nn.Embedding:
    """nn.Embedding [rows, width]; on the meta device (`CausalLM.from_weights`) without its random init, which
    the weights replace anyway and whose meta kernel imports torch._dynamo (with sympy and triton: ~140 MiB
    resident in every server process)."""
    if torch.empty(0).is_meta:
        return nn.Embedding(rows, width, _weight=torch.empty(rows, width))
    return nn.Embedding(rows, width)


class DecoderStack(nn.Module):
    """Token embedding, the layers and the final norm (the `model.` prefix of HF checkpoints)."""

    def __init__(self, config: ModelConfig, backend: AttentionBackend, ops: DecoderOps,
                 tensor_parallel: TensorParallelGroup = SINGLE_RANK) -> None:
        super().__init__()
        self.embed_tokens = _embedding(tensor_parallel.split(config.vocab_size), config.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(config, index, backend, ops, tensor_parallel) for index in range(config.num_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, ops)


class CausalLM(nn.Module):
    """The full model: `forward` gives final hidden states of new tokens, `compute_logits` projects them.

    Build it with weights through `from_weights`; call it under `torch.inference_mode()`. `ops` defaults to
    the kernels of `device` (`decoder_ops_for`); `tensor_parallel` is the rank's group (its part of the weights).
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        attention_backend: AttentionBackend,
        device: torch.device | str,
        ops: DecoderOps | None = None,
        tensor_parallel: TensorParallelGroup = SINGLE_RANK,
    ) -> None:
        super().__init__()
        self.config = config
        self.tensor_parallel = tensor_parallel
        device = torch.device(device)
        self.ops = ops or decoder_ops_for(
            device, rotary_inverse_frequencies(config, device), config.max_position_embeddings
        )
        self.model = DecoderStack(config, attention_backend, self.ops, tensor_parallel)
        # With tied embeddings the output projection reuses `model.embed_tokens.weight`.
        vocab_rows = tensor_parallel.split(config.vocab_size)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(config.hidden_size, vocab_rows, bias=False)
        self.logits_projection: LinearOp | None = None
        self.projections_fused = False

    @classmethod
    def from_weights(
        cls,
        config: ModelConfig,
        read_weights: WeightReader,
        *,
        attention_backend: AttentionBackend,
        device: torch.device | str,
        ops: DecoderOps | None = None,
        tensor_parallel: TensorParallelGroup = SINGLE_RANK,
    ) -> CausalLM:
        """The model (eval, no grad, projections fused) holding the tensors `read_weights` returns for the
        model's parameter names and shapes (the rank's parts under tensor parallelism); nothing is allocated twice."""
        with torch.device("meta"):  # shapes only: the weights come from `read_weights`
            model = cls(config, attention_backend=attention_backend, device=device, ops=ops,
                        tensor_parallel=tensor_parallel)
        tensors = read_weights({name: tuple(tensor.shape) for name, tensor in model.state_dict().items()})
        quantized = {name: tensor for name, tensor in tensors.items() if isinstance(tensor, QUANTIZED_TYPES)}
        dense = {name: tensor for name, tensor in tensors.items() if name not in quantized}
        missing, unexpected = model.load_state_dict(dense, strict=False, assign=True)
        if unexpected or set(missing) != set(quantized):
            absent = sorted(set(missing) - set(quantized))
            raise RuntimeError(f"CausalLM.from_weights: unexpected {unexpected}, missing {absent}")
        del tensors, dense  # the model holds them now; the fusion below frees the parts it merges
        model.place_quantized(quantized)
        model.requires_grad_(False)
        model.fuse_projections()
        return model.eval()

    def forward(
        self, input_ids: Tensor, positions: Tensor, metadata: AttentionMetadata, kv_cache: KVStorage,
        attention: AttentionBackend | None = None,
    ) -> Tensor:
        """input_ids [T], positions [T] -> normalised hidden states [T, hidden_size]; writes K/V of all T tokens.

        `attention` replaces the model's backend for this pass only, with `metadata` and `kv_cache` of its kind
        (`attention/uncached.py`: whole sequences, no KV cache)."""
        states = self.tensor_parallel.embed(self.model.embed_tokens, input_ids)  # [T, hidden]
        rotation = self.ops.rotation(positions, states.dtype)
        residual = None
        for layer in self.model.layers:
            states, residual = layer(states, residual, rotation, metadata, kv_cache, attention)
        return self.model.norm.add_and_norm(states, residual)[0]

    def place_quantized(self, weights: dict[str, QuantizedWeight | Int8Weight]) -> None:
        """Put block-quantized or int8 weights (CPU only) where their checkpoint names say: a projection, the
        embedding table or the output projection keeps its weight aside (its float parameter removed) for
        `fuse_projections` to bind a kernel to."""
        for name, weight in weights.items():
            module_name, _, parameter = name.rpartition(".")
            module = self.get_submodule(module_name)
            if isinstance(module, (nn.Linear, nn.Embedding)) and parameter == "weight":
                module.register_parameter("weight", None)
                module.quantized_weight = weight
            else:
                raise NotImplementedError(f"quantized weights apply to embeddings and linear layers, not {name!r}")

    def fuse_projections(self) -> None:
        """Merge q/k/v and gate/up weights into single matmuls and bind every projection's kernel, once the
        weights are in place (`from_weights` does it; a model built without it refuses to run). A block-quantized
        output projection runs `BlockLinear` (float32 logits from the stored table) and a block-quantized
        embedding table is looked up in place (`BlockEmbedding`), the two sharing one table when tied."""
        for layer in self.model.layers:
            layer.self_attn.fuse_projections()
            layer.mlp.fuse_projections()
        embedding = self.model.embed_tokens
        output = embedding if self.lm_head is None else self.lm_head
        output_weight = getattr(output, "quantized_weight", None)
        if isinstance(output_weight, QuantizedWeight):
            self.logits_projection = BlockLinear(output_weight, None)
        else:
            self.logits_projection = DenseLinear(self.ops, _dequantized(output), None)
        embedded = getattr(embedding, "quantized_weight", None)
        if isinstance(embedded, QuantizedWeight):
            table = self.logits_projection if embedded is output_weight else BlockLinear(embedded, None)
            self.model.embed_tokens = BlockEmbedding(table)
        for module in (embedding, self.lm_head):
            if module is not None and hasattr(module, "quantized_weight"):
                del module.quantized_weight
        self.projections_fused = True
        if self.model.norm.weight.is_cuda:
            # The merged parts go back to the driver now: left cached, the next allocations (the KV pool)
            # would split their blocks and keep them reserved for good.
            torch.cuda.empty_cache()

    def multiply_blocks_in_integers(self) -> None:
        """Run every block-quantized product (`BlockLinear`: the layers' matrices, the output projection) through
        `Int8DotLinear` on the same blocks, activations quantized to int8 per 32 columns (`--cpu-activations
        int8`); the embedding lookup stays exact. Raises ValueError when the model holds no block-quantized matrix."""
        owners = [(self, "logits_projection")]
        for layer in self.model.layers:
            owners += [(layer.self_attn, "qkv"), (layer.self_attn, "output"),
                       (layer.mlp, "gate_up"), (layer.mlp, "down")]
        products = [(owner, name) for owner, name in owners if isinstance(getattr(owner, name), BlockLinear)]
        if not products:
            raise ValueError("integer activations multiply block-quantized matrices, and this model holds none")
        for owner, name in products:
            setattr(owner, name, Int8DotLinear(getattr(owner, name)))

    def compute_logits(self, hidden: Tensor) -> Tensor:
        """hidden [N, hidden_size] -> float32 logits [N, vocab_size] (on rank 0 under tensor parallelism, which
        gathers the ranks' vocabulary slices; the other ranks get their slice)."""
        return self.tensor_parallel.gather_vocab(self.logits_projection(hidden).float())


LinearOp = Callable[[Tensor], Tensor]


class DenseLinear:
    """x @ weight.T (+ bias) through the ops' linear: a float weight's kernel, bound at load."""

    def __init__(self, ops: DecoderOps, weight: Tensor, bias: Tensor | None) -> None:
        self.ops, self.weight, self.bias = ops, weight, bias

    def __call__(self, states: Tensor) -> Tensor:
        return self.ops.linear(states, self.weight, self.bias)


def fused_linear(ops: DecoderOps, *layers: nn.Linear) -> LinearOp:
    """One matmul for the layers' outputs side by side, its kernel chosen here, once, when every layer holds a
    quantized weight of one kind (`place_quantized`): torch's CPU int8 kernel for int8 weights, its int4 kernel
    for block-quantized ones of a shape it packs; else the ops' linear over the float weights (quantized parts
    dequantized first). The layers' own quantized parts are released once merged, and their biases become
    slices of the kernel's."""
    quantized = [getattr(layer, "quantized_weight", None) for layer in layers]
    if all(weight is not None for weight in quantized) and len({weight.kind for weight in quantized}) == 1:
        is_int8 = quantized[0].kind == Int8Weight.kind
        merged = Int8Weight.concatenate(quantized) if is_int8 else concatenate(quantized)
        kernel = (Int8Linear if is_int8 else BlockLinear)(merged, _shared_bias(*layers))
        for layer in layers:
            del layer.quantized_weight
        return kernel
    for layer, weight in zip(layers, quantized):
        if weight is not None:
            layer.weight = nn.Parameter(weight.dequantize(), requires_grad=False)
            del layer.quantized_weight
    if len(layers) == 1:
        return DenseLinear(ops, layers[0].weight, layers[0].bias)
    return DenseLinear(ops, *fuse_linear_weights(*layers))


def _dequantized(module: nn.Module) -> Tensor:
    """The module's float weight, its quantized one (`place_quantized`) dequantized in its place when it has one."""
    quantized = getattr(module, "quantized_weight", None)
    if quantized is not None:
        module.weight = nn.Parameter(quantized.dequantize(), requires_grad=False)
    return module.weight


def _shared_bias(*layers: nn.Linear) -> Tensor | None:
    """The layers' biases side by side in one new tensor, each layer's bias re-pointed at its slice (so nothing
    is held twice); None when the layers have none."""
    if any(layer.bias is None for layer in layers):
        return None
    bias = torch.cat([layer.bias for layer in layers])
    start = 0
    for layer in layers:
        rows = layer.bias.shape[0]
        layer.bias = nn.Parameter(bias[start: start + rows], requires_grad=False)
        start += rows
    return bias


def fuse_linear_weights(*layers: nn.Linear) -> tuple[Tensor, Tensor | None]:
    """Concatenate the layers' weights (and biases) along the output axis into one new tensor, and re-point
    each layer's parameters at its slice, so the checkpoint names stay valid and nothing is held twice.
    """
    with torch.no_grad():
        weight = torch.cat([layer.weight for layer in layers])
        has_bias = [layer.bias is not None for layer in layers]
        if any(has_bias) and not all(has_bias):
            raise ValueError("fuse_linear_weights: either every layer has a bias or none")
        bias = torch.cat([layer.bias for layer in layers]) if all(has_bias) else None
        start = 0
        for layer in layers:
            rows = layer.weight.shape[0]
            layer.weight = nn.Parameter(weight[start: start + rows], requires_grad=False)
            if bias is not None:
                layer.bias = nn.Parameter(bias[start: start + rows], requires_grad=False)
            start += rows
    return weight, bias


def rotary_inverse_frequencies(config: ModelConfig, device: torch.device) -> Tensor:
    """RoPE's inverse frequencies [D / 2] (float32, on `device`) in the half-split layout of HF checkpoints,
    with Llama 3.1 scaling when the config has it. They are fixed by the config, not model weights."""
    exponents = torch.arange(0, config.head_dim, 2, dtype=torch.float32, device=device) / config.head_dim
    inverse_frequencies = 1.0 / (config.rope_theta**exponents)  # [D / 2]
    if config.rope_scaling is not None:
        inverse_frequencies = llama3_scaled_frequencies(inverse_frequencies, config.rope_scaling)
    return inverse_frequencies


def llama3_scaled_frequencies(inverse_frequencies: Tensor, scaling: Llama3RopeScaling) -> Tensor:
    """Llama 3.1 scaling: keep short wavelengths, divide long ones by `factor`, blend smoothly in between."""
    wavelengths = 2 * math.pi / inverse_frequencies
    long_wavelength = scaling.original_max_position_embeddings / scaling.low_freq_factor
    short_wavelength = scaling.original_max_position_embeddings / scaling.high_freq_factor
    # Blend weight 1 at the short-wavelength edge, 0 at the long-wavelength edge.
    keep_weight = (scaling.original_max_position_embeddings / wavelengths - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    blended = (1 - keep_weight) * inverse_frequencies / scaling.factor + keep_weight * inverse_frequencies
    scaled = torch.where(wavelengths > long_wavelength, inverse_frequencies / scaling.factor, blended)
    return torch.where(wavelengths < short_wavelength, inverse_frequencies, scaled)
