"""The decoder-only language model shared by the Llama, Qwen2 and Qwen3 architectures, run on a flattened
varlen batch over the paged KV cache. Module and parameter names match HF checkpoints (`model.layers.N...`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from arbi_grpc.models.attention_backend import AttentionBackend
from arbi_grpc.models.attention_metadata import AttentionMetadata
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.decoder_attention import DecoderAttention
from arbi_grpc.models.kv_cache import PagedKVCache
from arbi_grpc.models.layers import RMSNorm, SwiGLUMLP, project
from arbi_grpc.models.rotary import RotaryAngles, RotaryEmbedding


class DecoderLayer(nn.Module):
    """Pre-norm residual block: attention, then SwiGLU MLP."""

    def __init__(self, config: ModelConfig, layer_index: int, backend: AttentionBackend) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = DecoderAttention(config, layer_index, backend)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = SwiGLUMLP(config.hidden_size, config.intermediate_size)

    def forward(
        self,
        states: Tensor,
        residual: Tensor | None,
        rotary: RotaryAngles,
        metadata: AttentionMetadata,
        kv_cache: PagedKVCache,
    ) -> tuple[Tensor, Tensor]:
        """(this layer's MLP output, the residual stream before it): the next layer adds the two (fused into
        its input norm), so the stream is `states + residual` between layers. The first layer has no residual.
        """
        if residual is None:
            residual, normed = states, self.input_layernorm(states)
        else:
            normed, residual = self.input_layernorm.add_and_norm(states, residual)
        attended = self.self_attn(normed, rotary, metadata, kv_cache)
        normed, residual = self.post_attention_layernorm.add_and_norm(attended, residual)
        return self.mlp(normed), residual


class DecoderStack(nn.Module):
    """Token embedding, the layers and the final norm (the `model.` prefix of HF checkpoints)."""

    def __init__(self, config: ModelConfig, backend: AttentionBackend) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, index, backend) for index in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class CausalLM(nn.Module):
    """The full model: `forward` gives final hidden states of new tokens, `compute_logits` projects them.

    Build it through `load_model`, which fills the weights from a checkpoint.
    Call it under `torch.inference_mode()`.
    """

    def __init__(
        self, config: ModelConfig, *, attention_backend: AttentionBackend, device: torch.device | str
    ) -> None:
        super().__init__()
        self.config = config
        self.model = DecoderStack(config, attention_backend)
        # With tied embeddings the output projection reuses `model.embed_tokens.weight`.
        self.lm_head = (
            None if config.tie_word_embeddings else nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        )
        self.rotary = RotaryEmbedding(config, device)
        self.projections_fused = False

    def forward(
        self, input_ids: Tensor, positions: Tensor, metadata: AttentionMetadata, kv_cache: PagedKVCache
    ) -> Tensor:
        """input_ids [T], positions [T] -> normalised hidden states [T, hidden_size]; writes K/V of all T tokens."""
        if not self.projections_fused:
            self.fuse_projections()
        states = self.model.embed_tokens(input_ids)  # [T, hidden]
        rotary = self.rotary.for_positions(positions, states.dtype)
        residual = None
        for layer in self.model.layers:
            states, residual = layer(states, residual, rotary, metadata, kv_cache)
        return self.model.norm.add_and_norm(states, residual)[0]

    def fuse_projections(self) -> None:
        """Merge q/k/v and gate/up weights into single matmuls, once the weights are in place (`load_model` does
        it; otherwise the first forward pass does)."""
        for layer in self.model.layers:
            layer.self_attn.fuse_projections()
            layer.mlp.fuse_projections()
        self.projections_fused = True
        if self.model.embed_tokens.weight.is_cuda:
            # The merged parts go back to the driver now: left cached, the next allocations (the KV pool)
            # would split their blocks and keep them reserved for good.
            torch.cuda.empty_cache()

    def compute_logits(self, hidden: Tensor) -> Tensor:
        """hidden [N, hidden_size] -> float32 logits [N, vocab_size]."""
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return project(hidden, weight).float()
