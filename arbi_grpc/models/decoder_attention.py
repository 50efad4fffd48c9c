"""The decoder's self-attention block: q/k/v projections (optional bias), optional per-head q/k RMSNorm,
RoPE, paged attention through a pluggable backend, and the output projection.
"""

from __future__ import annotations

from torch import Tensor, nn

from arbi_grpc.models.attention_backend import AttentionBackend
from arbi_grpc.models.attention_metadata import AttentionMetadata
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.kv_cache import PagedKVCache
from arbi_grpc.models.layers import RMSNorm, fuse_linear_weights, project
from arbi_grpc.models.rotary import RotaryAngles


class DecoderAttention(nn.Module):
    """Grouped-query self-attention of one layer, parameter names as in HF Llama/Qwen2/Qwen3 checkpoints."""

    def __init__(self, config: ModelConfig, layer_index: int, backend: AttentionBackend) -> None:
        super().__init__()
        self.layer_index = layer_index
        self.backend = backend
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        query_width = config.num_heads * config.head_dim
        kv_width = config.num_kv_heads * config.head_dim
        self.q_proj = nn.Linear(config.hidden_size, query_width, bias=config.attention_bias)
        self.k_proj = nn.Linear(config.hidden_size, kv_width, bias=config.attention_bias)
        self.v_proj = nn.Linear(config.hidden_size, kv_width, bias=config.attention_bias)
        self.o_proj = nn.Linear(query_width, config.hidden_size, bias=config.output_projection_bias)
        self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps) if config.qk_norm else None
        self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps) if config.qk_norm else None
        self.qkv_weight: Tensor | None = None
        self.qkv_bias: Tensor | None = None

    def fuse_projections(self) -> None:
        """Multiply q, k and v in one matmul: their weights become views into one [(H + 2 Hkv) D, hidden] matrix."""
        self.qkv_weight, self.qkv_bias = fuse_linear_weights(self.q_proj, self.k_proj, self.v_proj)

    def forward(
        self, states: Tensor, rotary: RotaryAngles, metadata: AttentionMetadata, kv_cache: PagedKVCache
    ) -> Tensor:
        if self.qkv_weight is None:
            raise RuntimeError("DecoderAttention: call CausalLM.fuse_projections() once the weights are loaded")
        num_tokens = states.shape[0]
        query_width = self.num_heads * self.head_dim
        kv_width = self.num_kv_heads * self.head_dim
        qkv = project(states, self.qkv_weight, self.qkv_bias)  # [T, (H + 2 Hkv) D]
        query = qkv[:, :query_width].view(num_tokens, self.num_heads, self.head_dim)  # [T, H, D]
        key = qkv[:, query_width: query_width + kv_width].view(num_tokens, self.num_kv_heads, self.head_dim)
        value = qkv[:, query_width + kv_width:].view(num_tokens, self.num_kv_heads, self.head_dim)  # [T, Hkv, D]
        head_norms = (self.q_norm, self.k_norm) if self.q_norm is not None and self.k_norm is not None else None
        query, key = rotary.apply(query, key, head_norms)
        attended = self.backend.forward(self.layer_index, query, key, value, metadata, kv_cache)  # [T, H, D]
        attended = attended.reshape(num_tokens, self.num_heads * self.head_dim)
        return project(attended, self.o_proj.weight, self.o_proj.bias)
