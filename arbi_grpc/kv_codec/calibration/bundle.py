"""A model's TKV calibration: per-layer (key bits, value bits), per-layer per-kv-head channel scales and
shifts, and the bundle format that stores it (a directory with tkv_calibration.json + tkv_tensors.safetensors).

The JSON carries the model fingerprint it was calibrated for and the SHA-256 of the tensor file; loading for
another model raises InvalidArgumentError naming both fingerprints, a damaged bundle raises ModelLoadError.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from arbi_grpc.errors import ArbiError, InvalidArgumentError, ModelLoadError
from arbi_grpc.kv_codec.codec import ChannelTransform, TkvLayerCodec
from arbi_grpc.kv_codec.spec import TkvSpec, validate_group_size

BUNDLE_FORMAT = "arbi-tkv-calibration/1"
METADATA_FILE = "tkv_calibration.json"
TENSORS_FILE = "tkv_tensors.safetensors"
TENSOR_NAMES = ("key_scales", "value_scales", "key_shifts", "value_shifts")


@dataclass(frozen=True, eq=False)
class TkvCalibration:
    """Everything the engine needs to build each layer's TkvLayerCodec.

    key_scales / value_scales: fp32 [num_layers, num_kv_heads, head_dim], finite and positive (ones = none).
    key_shifts / value_shifts: fp32, same shape, in the rotated space (zeros = none).
    layer_bits: one (key_bits, value_bits) pair per layer.
    sink_tokens: leading tokens per sequence kept in fp16 (their activations must not be calibration samples).
    """

    model_fingerprint: str
    group_size: int
    rotate: bool
    layer_bits: tuple[tuple[int, int], ...]
    key_scales: torch.Tensor
    value_scales: torch.Tensor
    key_shifts: torch.Tensor
    value_shifts: torch.Tensor
    method: str = "none"
    sink_tokens: int = 1

    def __post_init__(self) -> None:
        tensors = (self.key_scales, self.value_scales, self.key_shifts, self.value_shifts)
        if self.key_scales.dim() != 3 or any(t.shape != self.key_scales.shape for t in tensors):
            raise InvalidArgumentError(
                "kv_calibration",
                f"scales and shifts must all be [layers, kv_heads, head_dim]; got {[list(t.shape) for t in tensors]}",
            )
        if len(self.layer_bits) != self.num_layers:
            raise InvalidArgumentError(
                "kv_calibration", f"{len(self.layer_bits)} (key, value) bit pairs for {self.num_layers} layers"
            )
        validate_group_size(self.group_size, self.head_dim)
        for key_bits, value_bits in self.layer_bits:
            TkvSpec(key_bits, value_bits, self.group_size, self.sink_tokens)
        if any(t.dtype != torch.float32 or not bool(torch.isfinite(t).all()) for t in tensors):
            raise InvalidArgumentError("kv_calibration", "channel scales and shifts must be finite fp32")
        if not bool((self.key_scales > 0).all()) or not bool((self.value_scales > 0).all()):
            raise InvalidArgumentError("kv_calibration", "channel scales must be positive")

    @classmethod
    def uniform(
        cls,
        model_fingerprint: str,
        spec: TkvSpec,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        rotate: bool = True,
    ) -> TkvCalibration:
        """An uncalibrated calibration: the same bits in every layer, channel scales 1, shifts 0."""
        ones = torch.ones(num_layers, num_kv_heads, head_dim, dtype=torch.float32)
        bits = ((spec.key_bits, spec.value_bits),) * num_layers
        zeros = torch.zeros_like(ones)
        return cls(
            model_fingerprint, spec.group_size, rotate, bits, ones, ones.clone(), zeros, zeros.clone(), "none",
            spec.sink_tokens,
        )

    @property
    def num_layers(self) -> int:
        return self.key_scales.shape[0]

    @property
    def num_kv_heads(self) -> int:
        return self.key_scales.shape[1]

    @property
    def head_dim(self) -> int:
        return self.key_scales.shape[2]

    def average_bits(self) -> float:
        """Mean code bits over all layers' keys and values (group metadata not counted)."""
        return sum(k + v for k, v in self.layer_bits) / (2 * self.num_layers)

    def layer_spec(self, layer: int) -> TkvSpec:
        key_bits, value_bits = self.layer_bits[layer]
        return TkvSpec(key_bits, value_bits, self.group_size, self.sink_tokens)

    def layer_codec(self, layer: int) -> TkvLayerCodec:
        """The codec for `layer` (0-based)."""
        if not 0 <= layer < self.num_layers:
            raise InvalidArgumentError("layer", f"must be in [0, {self.num_layers}), got {layer}")
        return TkvLayerCodec(
            self.layer_spec(layer),
            ChannelTransform(self.key_scales[layer], self.key_shifts[layer]),
            ChannelTransform(self.value_scales[layer], self.value_shifts[layer]),
            self.rotate,
        )

    def save(self, bundle_dir: Path) -> None:
        """Write the bundle into `bundle_dir` (created if missing; the two bundle files are overwritten)."""
        from safetensors.torch import save_file

        bundle_dir = Path(bundle_dir)
        bundle_dir.mkdir(parents=True, exist_ok=True)
        tensors_path = bundle_dir / TENSORS_FILE
        save_file({name: getattr(self, name).contiguous() for name in TENSOR_NAMES}, str(tensors_path))
        metadata = {
            "format": BUNDLE_FORMAT,
            "model_fingerprint": self.model_fingerprint,
            "group_size": self.group_size,
            "rotate": self.rotate,
            "method": self.method,
            "sink_tokens": self.sink_tokens,
            "layer_bits": [list(pair) for pair in self.layer_bits],
            "tensors_sha256": hashlib.sha256(tensors_path.read_bytes()).hexdigest(),
        }
        (bundle_dir / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n")

    @classmethod
    def load(cls, bundle_dir: Path, model_fingerprint: str) -> TkvCalibration:
        """Read a bundle calibrated for the model whose fingerprint is `model_fingerprint`."""
        bundle_dir = Path(bundle_dir)
        metadata = _read_metadata(bundle_dir / METADATA_FILE)
        if metadata["model_fingerprint"] != model_fingerprint:
            raise InvalidArgumentError(
                "kv_calibration",
                f"bundle {bundle_dir} was calibrated for model {metadata['model_fingerprint']}, "
                f"not for the loaded model {model_fingerprint}",
            )
        tensors = _read_tensors(bundle_dir / TENSORS_FILE, metadata)
        try:
            return cls(
                metadata["model_fingerprint"],
                metadata["group_size"],
                metadata["rotate"],
                tuple((int(k), int(v)) for k, v in metadata["layer_bits"]),
                *tensors,
                method=metadata["method"],
                sink_tokens=metadata["sink_tokens"],
            )
        except (ArbiError, TypeError, ValueError) as error:
            raise ModelLoadError(f"{bundle_dir}: invalid TKV calibration bundle ({error})") from error


def _read_metadata(path: Path) -> dict[str, Any]:
    try:
        metadata = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"{path}: cannot read TKV calibration metadata ({error})") from error
    required = (
        "format", "model_fingerprint", "group_size", "rotate", "method", "sink_tokens", "layer_bits", "tensors_sha256"
    )
    if not isinstance(metadata, dict) or any(key not in metadata for key in required):
        raise ModelLoadError(f"{path}: TKV calibration metadata must be an object with keys {list(required)}")
    if metadata["format"] != BUNDLE_FORMAT:
        raise ModelLoadError(f"{path}: format {metadata['format']!r}, expected {BUNDLE_FORMAT!r}")
    return metadata


def _read_tensors(path: Path, metadata: dict[str, Any]) -> list[torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ModelLoadError(f"{path}: cannot read TKV channel scales/shifts ({error})") from error
    if hashlib.sha256(raw).hexdigest() != metadata["tensors_sha256"]:
        raise ModelLoadError(f"{path}: checksum does not match {METADATA_FILE} (truncated or modified)")
    try:
        tensors = load(raw)
        return [tensors[name] for name in TENSOR_NAMES]
    except (KeyError, RuntimeError, ValueError, SafetensorError) as error:
        raise ModelLoadError(f"{path}: not a TKV tensors file ({error})") from error
