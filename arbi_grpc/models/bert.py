"""The BERT encoder (`BertModel`): its config, its checkpoint tensors and a padded batched forward pass.

Bidirectional self-attention over a right-padded batch with an attention mask; absolute position and
token-type embeddings, post-layer-norm blocks with GELU (erf) MLPs. The pooler head is not used: pooling
is the embedding model's (`embeddings/pooling.py`). Weights keep the checkpoint's parameter names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from arbi_grpc.errors import ModelLoadError
from arbi_grpc.models.checkpoint_reader import read_checkpoint_tensors, read_hf_config

BERT_ARCHITECTURE = "BertModel"


@dataclass(frozen=True)
class BertConfig:
    """The fields of a BERT `config.json` the encoder reads."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_positions: int
    type_vocab_size: int
    layer_norm_eps: float
    pad_token_id: int

    @classmethod
    def from_hf_config(cls, raw: dict[str, Any]) -> BertConfig:
        architectures = raw.get("architectures") or []
        if BERT_ARCHITECTURE not in architectures:
            raise ModelLoadError(f"architectures {architectures} are not {BERT_ARCHITECTURE}")
        if raw.get("hidden_act", "gelu") != "gelu" or raw.get("position_embedding_type", "absolute") != "absolute":
            raise ModelLoadError("only BertModel with gelu and absolute position embeddings is supported, got "
                                 f"hidden_act={raw.get('hidden_act')!r}, "
                                 f"position_embedding_type={raw.get('position_embedding_type')!r}")
        config = cls(
            vocab_size=int(raw["vocab_size"]), hidden_size=int(raw["hidden_size"]),
            num_layers=int(raw["num_hidden_layers"]), num_heads=int(raw["num_attention_heads"]),
            intermediate_size=int(raw["intermediate_size"]), max_positions=int(raw["max_position_embeddings"]),
            type_vocab_size=int(raw.get("type_vocab_size", 2)), layer_norm_eps=float(raw.get("layer_norm_eps", 1e-12)),
            pad_token_id=int(raw.get("pad_token_id", 0)),
        )
        if config.hidden_size % config.num_heads:
            raise ModelLoadError(f"hidden_size {config.hidden_size} is not a multiple of {config.num_heads} heads")
        return config

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """The checkpoint tensors the encoder needs, by name."""
        h, i = self.hidden_size, self.intermediate_size
        shapes: dict[str, tuple[int, ...]] = {
            "embeddings.word_embeddings.weight": (self.vocab_size, h),
            "embeddings.position_embeddings.weight": (self.max_positions, h),
            "embeddings.token_type_embeddings.weight": (self.type_vocab_size, h),
            "embeddings.LayerNorm.weight": (h,), "embeddings.LayerNorm.bias": (h,),
        }
        for layer in range(self.num_layers):
            p = f"encoder.layer.{layer}."
            for name, shape in (("attention.self.query", (h, h)), ("attention.self.key", (h, h)),
                                ("attention.self.value", (h, h)), ("attention.output.dense", (h, h)),
                                ("intermediate.dense", (i, h)), ("output.dense", (h, i))):
                shapes[f"{p}{name}.weight"] = shape
                shapes[f"{p}{name}.bias"] = (shape[0],)
            for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
                shapes[f"{p}{norm}.weight"] = (h,)
                shapes[f"{p}{norm}.bias"] = (h,)
        return shapes


def _is_unused(name: str) -> bool:
    """Tensors of a BERT checkpoint the encoder does not read: the pooler head and position-id buffers."""
    return name.startswith("pooler.") or name.endswith("position_ids")


class BertEncoder:
    """A BERT encoder over fixed weights; `forward` maps padded token ids to hidden states."""

    def __init__(self, config: BertConfig, weights: dict[str, Tensor]) -> None:
        self.config = config
        self.weights = weights
        self.device = weights["embeddings.word_embeddings.weight"].device
        self.dtype = weights["embeddings.word_embeddings.weight"].dtype

    @classmethod
    def load(cls, model_dir: Path, dtype: torch.dtype = torch.float32,
             device: torch.device | str = "cpu") -> BertEncoder:
        config = BertConfig.from_hf_config(read_hf_config(model_dir))
        weights = read_checkpoint_tensors(model_dir, expected_shapes=config.expected_shapes(),
                                          is_ignored=_is_unused, dtype=dtype, device=device)
        return cls(config, weights)

    @classmethod
    def random(cls, config: BertConfig, dtype: torch.dtype, device: torch.device | str, seed: int = 0) -> BertEncoder:
        """Random weights of `config`'s shapes (benchmarks)."""
        generator = torch.Generator().manual_seed(seed)
        weights = {name: (torch.randn(shape, generator=generator) * 0.02).to(dtype=dtype, device=device)
                   for name, shape in config.expected_shapes().items()}
        return cls(config, weights)

    def _norm(self, x: Tensor, prefix: str) -> Tensor:
        w = self.weights
        return F.layer_norm(x, (x.shape[-1],), w[f"{prefix}.weight"], w[f"{prefix}.bias"], self.config.layer_norm_eps)

    def _linear(self, x: Tensor, prefix: str) -> Tensor:
        return F.linear(x, self.weights[f"{prefix}.weight"], self.weights[f"{prefix}.bias"])

    @torch.inference_mode()
    def forward(self, token_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Hidden states [batch, seq, hidden] of right-padded `token_ids` [batch, seq]; `attention_mask` is 1
        on real tokens. Token type 0 for every position (single-segment inputs)."""
        c, w = self.config, self.weights
        batch, seq = token_ids.shape
        positions = torch.arange(seq, device=self.device)
        x = (w["embeddings.word_embeddings.weight"][token_ids] + w["embeddings.position_embeddings.weight"][positions]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._norm(x, "embeddings.LayerNorm")
        keep = attention_mask.to(torch.bool)[:, None, None, :]  # [batch, 1, 1, seq]: keys a query may attend to
        head_dim = c.hidden_size // c.num_heads
        for layer in range(c.num_layers):
            p = f"encoder.layer.{layer}."

            def heads(t: Tensor) -> Tensor:
                return t.view(batch, seq, c.num_heads, head_dim).transpose(1, 2)

            q = heads(self._linear(x, p + "attention.self.query"))
            k = heads(self._linear(x, p + "attention.self.key"))
            v = heads(self._linear(x, p + "attention.self.value"))
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            attended = attended.transpose(1, 2).reshape(batch, seq, c.hidden_size)
            x = self._norm(x + self._linear(attended, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            hidden = F.gelu(self._linear(x, p + "intermediate.dense"))
            x = self._norm(x + self._linear(hidden, p + "output.dense"), p + "output.LayerNorm")
        return x
