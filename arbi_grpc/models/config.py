"""The model hyper-parameters the decoder needs, parsed and validated from a Hugging Face `config.json` dict.

Both config layouts are read: transformers 4.x (`rope_theta` + `rope_scaling`) and 5.x (`rope_parameters`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from arbi_grpc.errors import ModelLoadError, UnsupportedArchitectureError

SUPPORTED_ARCHITECTURES: tuple[str, ...] = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")

DEFAULT_ROPE_THETA = 10000.0
_PLAIN_ROPE_TYPES = ("default", None)
_SUPPORTED_ROPE_TYPES = "default (no scaling), llama3"


@dataclass(frozen=True)
class Llama3RopeScaling:
    """Llama 3.1 frequency-dependent RoPE scaling (`rope_type: "llama3"`)."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def __post_init__(self) -> None:
        if self.factor <= 0:
            raise ModelLoadError(f"config.json: rope scaling factor must be > 0, got {self.factor}")
        if self.original_max_position_embeddings <= 0:
            raise ModelLoadError(
                "config.json: rope scaling original_max_position_embeddings must be > 0, "
                f"got {self.original_max_position_embeddings}"
            )
        if not 0 < self.low_freq_factor < self.high_freq_factor:
            raise ModelLoadError(
                "config.json: rope scaling needs 0 < low_freq_factor < high_freq_factor, got "
                f"{self.low_freq_factor} and {self.high_freq_factor}"
            )


@dataclass(frozen=True)
class ModelConfig:
    """Everything the decoder code needs to build and run one of the supported architectures."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: Llama3RopeScaling | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool  # q_proj, k_proj and v_proj carry a bias
    output_projection_bias: bool  # o_proj carries a bias
    qk_norm: bool  # per-head RMSNorm on queries and keys before RoPE (Qwen3)
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    # (checkpoint name, "q4" | "q8") of the matrices stored block-quantized (a GGUF import; `quantized_layout`).
    quantized_matrices: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedArchitectureError(self.architecture, SUPPORTED_ARCHITECTURES)
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            if getattr(self, name) <= 0:
                raise ModelLoadError(f"config.json: {name} must be > 0, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads != 0:
            raise ModelLoadError(
                f"config.json: num_attention_heads ({self.num_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_kv_heads})"
            )
        if self.head_dim % 2 != 0:
            raise ModelLoadError(f"config.json: head_dim must be even for RoPE, got {self.head_dim}")
        if self.rms_norm_eps <= 0:
            raise ModelLoadError(f"config.json: rms_norm_eps must be > 0, got {self.rms_norm_eps}")
        if self.rope_theta <= 0:
            raise ModelLoadError(f"config.json: rope_theta must be > 0, got {self.rope_theta}")
        for token_id in (*self.eos_token_ids, *(() if self.bos_token_id is None else (self.bos_token_id,))):
            if not 0 <= token_id < self.vocab_size:
                raise ModelLoadError(
                    f"config.json: special token id {token_id} is outside the vocabulary [0, {self.vocab_size})"
                )

    @property
    def num_query_groups(self) -> int:
        """How many query heads share one key/value head."""
        return self.num_heads // self.num_kv_heads

    @classmethod
    def from_hf_config(cls, hf_config: dict[str, Any]) -> ModelConfig:
        """Parse an HF `config.json` dict; raises ModelLoadError naming the missing or invalid key."""
        architecture = _architecture(hf_config)
        _reject_unsupported_features(hf_config, architecture)
        hidden_size = _required_int(hf_config, "hidden_size")
        num_heads = _required_int(hf_config, "num_attention_heads")
        head_dim = _optional_int(hf_config, "head_dim")
        if head_dim is None:
            if hidden_size % num_heads != 0:
                raise ModelLoadError(
                    f"config.json: head_dim is absent and hidden_size ({hidden_size}) is not a multiple of "
                    f"num_attention_heads ({num_heads})"
                )
            head_dim = hidden_size // num_heads
        num_kv_heads = _optional_int(hf_config, "num_key_value_heads")
        bias_flag = _optional_bool(hf_config, "attention_bias", default=False)
        max_positions = _required_int(hf_config, "max_position_embeddings")
        rope_theta, rope_scaling = _rope(hf_config, max_positions)
        return cls(
            architecture=architecture,
            vocab_size=_required_int(hf_config, "vocab_size"),
            hidden_size=hidden_size,
            intermediate_size=_required_int(hf_config, "intermediate_size"),
            num_layers=_required_int(hf_config, "num_hidden_layers"),
            num_heads=num_heads,
            num_kv_heads=num_heads if num_kv_heads is None else num_kv_heads,
            head_dim=head_dim,
            rms_norm_eps=_required_number(hf_config, "rms_norm_eps"),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            max_position_embeddings=max_positions,
            tie_word_embeddings=_optional_bool(hf_config, "tie_word_embeddings", default=False),
            # Qwen2 hard-codes q/k/v biases (and no o_proj bias); Llama and Qwen3 follow `attention_bias`.
            attention_bias=True if architecture == "Qwen2ForCausalLM" else bias_flag,
            output_projection_bias=False if architecture == "Qwen2ForCausalLM" else bias_flag,
            qk_norm=architecture == "Qwen3ForCausalLM",
            bos_token_id=_optional_int(hf_config, "bos_token_id"),
            eos_token_ids=_eos_token_ids(hf_config),
        )


def _architecture(hf_config: dict[str, Any]) -> str:
    architectures = hf_config.get("architectures")
    if not isinstance(architectures, list) or not architectures or not all(
        isinstance(name, str) for name in architectures
    ):
        raise ModelLoadError(f"config.json: architectures must be a non-empty list of names, got {architectures!r}")
    if len(architectures) != 1:
        raise ModelLoadError(f"config.json: architectures must name exactly one class, got {architectures!r}")
    if architectures[0] not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedArchitectureError(architectures[0], SUPPORTED_ARCHITECTURES)
    return architectures[0]


def _reject_unsupported_features(hf_config: dict[str, Any], architecture: str) -> None:
    hidden_act = hf_config.get("hidden_act", "silu")
    if hidden_act != "silu":
        raise NotImplementedError(f"{architecture} with hidden_act={hidden_act!r}: only 'silu' (SwiGLU) is supported")
    if hf_config.get("mlp_bias", False):
        raise NotImplementedError(f"{architecture} with mlp_bias=true: only bias-free MLPs are supported")
    if hf_config.get("use_sliding_window", False) or "sliding_attention" in (hf_config.get("layer_types") or ()):
        raise NotImplementedError(f"{architecture} with sliding-window attention: only full attention is supported")


def _rope(hf_config: dict[str, Any], max_positions: int) -> tuple[float, Llama3RopeScaling | None]:
    """Read RoPE base and scaling from either `rope_parameters` (5.x) or `rope_theta` + `rope_scaling` (4.x)."""
    key = "rope_parameters" if hf_config.get("rope_parameters") is not None else "rope_scaling"
    params = hf_config.get(key) or {}
    if not isinstance(params, dict):
        raise ModelLoadError(f"config.json: {key} must be an object, got {params!r}")
    theta = params.get("rope_theta", hf_config.get("rope_theta", DEFAULT_ROPE_THETA))
    if isinstance(theta, bool) or not isinstance(theta, (int, float)):
        raise ModelLoadError(f"config.json: rope_theta must be a number, got {theta!r}")
    partial_rotary_factor = params.get("partial_rotary_factor", hf_config.get("partial_rotary_factor", 1.0))
    if partial_rotary_factor != 1.0:
        raise NotImplementedError(
            f"partial_rotary_factor={partial_rotary_factor}: only RoPE over the whole head_dim is supported"
        )
    if any(isinstance(value, dict) for value in params.values()):
        raise NotImplementedError(f"{key} given per layer type: only one RoPE setting for all layers is supported")
    rope_type = params.get("rope_type", params.get("type"))
    if rope_type in _PLAIN_ROPE_TYPES:
        return float(theta), None
    if rope_type != "llama3":
        raise NotImplementedError(f"{key} type {rope_type!r}: supported RoPE types are {_SUPPORTED_ROPE_TYPES}")
    original = params.get("original_max_position_embeddings", max_positions)
    return float(theta), Llama3RopeScaling(
        factor=_required_number(params, "factor", prefix=f"{key}."),
        low_freq_factor=_required_number(params, "low_freq_factor", prefix=f"{key}."),
        high_freq_factor=_required_number(params, "high_freq_factor", prefix=f"{key}."),
        original_max_position_embeddings=_checked_int(original, f"{key}.original_max_position_embeddings"),
    )


def _eos_token_ids(hf_config: dict[str, Any]) -> tuple[int, ...]:
    value = hf_config.get("eos_token_id")
    if value is None:
        return ()
    if isinstance(value, list):
        return tuple(_checked_int(item, "eos_token_id") for item in value)
    return (_checked_int(value, "eos_token_id"),)


def _checked_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelLoadError(f"config.json: {key} must be an integer, got {value!r}")
    return value


def _required_int(hf_config: dict[str, Any], key: str) -> int:
    if key not in hf_config:
        raise ModelLoadError(f"config.json: missing required key {key!r}")
    return _checked_int(hf_config[key], key)


def _optional_int(hf_config: dict[str, Any], key: str) -> int | None:
    value = hf_config.get(key)
    return None if value is None else _checked_int(value, key)


def _required_number(hf_config: dict[str, Any], key: str, prefix: str = "") -> float:
    if key not in hf_config:
        raise ModelLoadError(f"config.json: missing required key {prefix + key!r}")
    value = hf_config[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelLoadError(f"config.json: {prefix + key} must be a number, got {value!r}")
    return float(value)


def _optional_bool(hf_config: dict[str, Any], key: str, *, default: bool) -> bool:
    value = hf_config.get(key, default)
    if not isinstance(value, bool):
        raise ModelLoadError(f"config.json: {key} must be true or false, got {value!r}")
    return value
