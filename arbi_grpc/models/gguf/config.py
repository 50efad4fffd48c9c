"""Which GGUF architectures import, and how their GGUF metadata maps to a Hugging Face `config.json`.

Owns the supported-architecture table (llama, qwen2, qwen3), the validated model dimensions read from the
`{arch}.*` metadata keys, and the HF config dictionary built from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arbi_grpc.errors import ModelLoadError, UnsupportedArchitectureError
from arbi_grpc.models.gguf.file import GgufMetadata


@dataclass(frozen=True)
class ArchitectureSpec:
    """One importable GGUF architecture and its Hugging Face counterpart."""

    gguf_name: str
    hf_class: str
    model_type: str
    # llama.cpp's convert script permutes Q/K rows for its interleaved RoPE on llama only; qwen2/qwen3 use
    # NeoX-style RoPE in llama.cpp and are stored in HF row order.
    qk_rows_permuted: bool
    # Per-layer tensors (GGUF suffix after `blk.N.`) this architecture always has beyond the llama set.
    extra_layer_tensors: tuple[str, ...]


_LLAMA_LAYER_TENSORS = (
    "attn_norm.weight",
    "attn_q.weight",
    "attn_k.weight",
    "attn_v.weight",
    "attn_output.weight",
    "ffn_norm.weight",
    "ffn_gate.weight",
    "ffn_up.weight",
    "ffn_down.weight",
)
ATTENTION_BIAS_TENSORS = ("attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias")

ARCHITECTURES: tuple[ArchitectureSpec, ...] = (
    ArchitectureSpec("llama", "LlamaForCausalLM", "llama", qk_rows_permuted=True, extra_layer_tensors=()),
    ArchitectureSpec(
        "qwen2",
        "Qwen2ForCausalLM",
        "qwen2",
        qk_rows_permuted=False,
        extra_layer_tensors=("attn_q.bias", "attn_k.bias", "attn_v.bias"),
    ),
    ArchitectureSpec(
        "qwen3",
        "Qwen3ForCausalLM",
        "qwen3",
        qk_rows_permuted=False,
        extra_layer_tensors=("attn_q_norm.weight", "attn_k_norm.weight"),
    ),
)
SUPPORTED_ARCHITECTURES: tuple[str, ...] = tuple(spec.gguf_name for spec in ARCHITECTURES)


def architecture_of(metadata: GgufMetadata) -> ArchitectureSpec:
    """The spec for `general.architecture`; anything outside the supported set is refused."""
    name = metadata.string("general.architecture")
    for spec in ARCHITECTURES:
        if spec.gguf_name == name:
            return spec
    raise UnsupportedArchitectureError(name, SUPPORTED_ARCHITECTURES)


def required_layer_tensors(spec: ArchitectureSpec, attention_bias: bool) -> tuple[str, ...]:
    """Every tensor suffix each `blk.N.` must carry for `spec` (llama adds o/q/k/v biases when it has any)."""
    bias = ATTENTION_BIAS_TENSORS if attention_bias and spec.gguf_name == "llama" else ()
    return _LLAMA_LAYER_TENSORS + spec.extra_layer_tensors + bias


@dataclass(frozen=True)
class ModelDimensions:
    """Decoder sizes and RoPE settings read from GGUF metadata, checked for internal consistency."""

    source: Path
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    context_length: int
    rope_scaling: dict[str, Any] | None

    def __post_init__(self) -> None:
        sizes = {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "num_kv_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "context_length": self.context_length,
        }
        for name, value in sizes.items():
            if value <= 0:
                raise ModelLoadError(f"{self.source}: GGUF metadata gives {name} = {value}, expected > 0")
        if self.num_heads % self.num_kv_heads != 0:
            raise ModelLoadError(
                f"{self.source}: {self.num_heads} attention heads are not a multiple of "
                f"{self.num_kv_heads} key/value heads"
            )
        if self.head_dim % 2 != 0:
            raise ModelLoadError(f"{self.source}: head_dim {self.head_dim} is odd; RoPE needs an even size")
        if not (self.rms_norm_eps > 0 and self.rope_theta > 0):
            raise ModelLoadError(
                f"{self.source}: rms_norm_eps ({self.rms_norm_eps}) and rope_theta ({self.rope_theta}) must be > 0"
            )


def read_dimensions(metadata: GgufMetadata, spec: ArchitectureSpec, vocab_size: int) -> ModelDimensions:
    """Model sizes from `{arch}.*` keys; `vocab_size` comes from the embedding tensor, which is authoritative."""
    arch = spec.gguf_name
    if metadata.integer("split.count", default=1) > 1:
        raise NotImplementedError("split (multi-file) GGUF models are not supported; merge them with gguf-split")
    hidden_size = metadata.integer(f"{arch}.embedding_length")
    num_heads = metadata.integer(f"{arch}.attention.head_count")
    head_dim = metadata.integer(f"{arch}.attention.key_length", default=hidden_size // max(num_heads, 1))
    value_dim = metadata.integer(f"{arch}.attention.value_length", default=head_dim)
    rope_dims = metadata.integer(f"{arch}.rope.dimension_count", default=head_dim)
    if value_dim != head_dim:
        raise NotImplementedError(f"GGUF with value head size {value_dim} != key head size {head_dim}")
    if rope_dims != head_dim:
        raise NotImplementedError(f"partial RoPE ({rope_dims} of {head_dim} head dimensions) is not supported")
    return ModelDimensions(
        source=metadata.path,
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=metadata.integer(f"{arch}.feed_forward_length"),
        num_layers=metadata.integer(f"{arch}.block_count"),
        num_heads=num_heads,
        num_kv_heads=metadata.integer(f"{arch}.attention.head_count_kv", default=num_heads),
        head_dim=head_dim,
        rms_norm_eps=metadata.number(f"{arch}.attention.layer_norm_rms_epsilon"),
        # llama.cpp's default when the key is absent.
        rope_theta=metadata.number(f"{arch}.rope.freq_base", default=10000.0),
        context_length=metadata.integer(f"{arch}.context_length"),
        rope_scaling=_rope_scaling(metadata, arch),
    )


def _rope_scaling(metadata: GgufMetadata, arch: str) -> dict[str, Any] | None:
    """HF `rope_scaling` for GGUF's `{arch}.rope.scaling.*` keys (linear and YaRN; none means None)."""
    prefix = f"{arch}.rope.scaling."
    legacy_linear = metadata.number(f"{arch}.rope.scale_linear", default=1.0)
    kind = metadata.string(prefix + "type", default="linear" if legacy_linear != 1.0 else "none")
    if kind == "none":
        return None
    factor = metadata.number(prefix + "factor", default=legacy_linear)
    if kind == "linear":
        return {"rope_type": "linear", "factor": factor}
    if kind == "yarn":
        scaling: dict[str, Any] = {
            "rope_type": "yarn",
            "factor": factor,
            "original_max_position_embeddings": metadata.integer(prefix + "original_context_length"),
        }
        optional = {"attention_factor": "attn_factor", "beta_fast": "yarn_beta_fast", "beta_slow": "yarn_beta_slow"}
        for hf_key, gguf_key in optional.items():
            if metadata.has(prefix + gguf_key):
                scaling[hf_key] = metadata.number(prefix + gguf_key)
        return scaling
    raise NotImplementedError(f"RoPE scaling type {kind!r} is not supported (supported: none, linear, yarn)")


@dataclass(frozen=True)
class SpecialTokenIds:
    """Token ids the model config and generation config carry (None when the GGUF does not set one)."""

    bos: int | None
    eos: int | None
    pad: int | None


def hf_config(
    spec: ArchitectureSpec,
    dimensions: ModelDimensions,
    special: SpecialTokenIds,
    *,
    tie_word_embeddings: bool,
    attention_bias: bool,
) -> dict[str, Any]:
    """The `config.json` dictionary transformers (and our loader) read for this model."""
    config: dict[str, Any] = {
        "architectures": [spec.hf_class],
        "model_type": spec.model_type,
        "vocab_size": dimensions.vocab_size,
        "hidden_size": dimensions.hidden_size,
        "intermediate_size": dimensions.intermediate_size,
        "num_hidden_layers": dimensions.num_layers,
        "num_attention_heads": dimensions.num_heads,
        "num_key_value_heads": dimensions.num_kv_heads,
        "head_dim": dimensions.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": dimensions.rms_norm_eps,
        "rope_theta": dimensions.rope_theta,
        "rope_scaling": dimensions.rope_scaling,
        "max_position_embeddings": dimensions.context_length,
        "tie_word_embeddings": tie_word_embeddings,
        "torch_dtype": "float32",
        "bos_token_id": special.bos,
        "eos_token_id": special.eos,
        "pad_token_id": special.pad,
    }
    if spec.gguf_name == "llama":
        config["attention_bias"] = attention_bias
        config["mlp_bias"] = False
    elif spec.gguf_name == "qwen3":
        config["attention_bias"] = False
    if spec.gguf_name in ("qwen2", "qwen3"):
        config["use_sliding_window"] = False
        config["sliding_window"] = None
    return config
