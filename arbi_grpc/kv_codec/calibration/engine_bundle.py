"""The TKV calibration an engine serves with: the bundle named by --kv-calibration, checked against the served
model's fingerprint, with --kv-bits (when given) replacing the bundle's per-layer bits."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from arbi_grpc.config import EngineConfig, parse_kv_bits
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration
from arbi_grpc.kv_codec.calibration.fingerprint import model_dir_fingerprint


def with_kv_bits(calibration: TkvCalibration, kv_bits: tuple[int, int] | None) -> TkvCalibration:
    """`calibration` with every layer at `kv_bits` (key, value); unchanged when None."""
    if kv_bits is None:
        return calibration
    return dataclasses.replace(calibration, layer_bits=(kv_bits,) * calibration.num_layers)


def load_bundle(bundle_dir: Path, model_fingerprint: str, kv_bits: tuple[int, int] | None) -> TkvCalibration:
    """Read and validate a bundle for the model `model_fingerprint`, then apply `kv_bits`.

    Raises InvalidArgumentError("kv_calibration") for a missing directory or a bundle of another model (naming
    both fingerprints), ModelLoadError for a corrupt bundle.
    """
    bundle_dir = Path(bundle_dir)
    if not bundle_dir.is_dir():
        raise InvalidArgumentError("kv_calibration", f"{bundle_dir} is not a directory holding a TKV calibration bundle")
    return with_kv_bits(TkvCalibration.load(bundle_dir, model_fingerprint), kv_bits)


def load_engine_calibration(config: EngineConfig, model_dir: Path) -> TkvCalibration | None:
    """The calibration of `config` for the model in `model_dir`; None unless config.kv_cache_dtype is "tkv"."""
    if config.kv_cache_dtype != "tkv":
        return None
    return load_bundle(Path(config.kv_calibration), model_dir_fingerprint(model_dir), parse_kv_bits(config.kv_bits))


def check_model_shape(calibration: TkvCalibration, num_layers: int, num_kv_heads: int, head_dim: int) -> None:
    """Refuse a calibration whose layers or heads do not match the model (a fingerprint collision or a hand-made
    bundle), naming both shapes."""
    bundle_shape = (calibration.num_layers, calibration.num_kv_heads, calibration.head_dim)
    if bundle_shape != (num_layers, num_kv_heads, head_dim):
        raise InvalidArgumentError(
            "kv_calibration",
            f"the bundle covers [layers, kv_heads, head_dim] = {list(bundle_shape)}, the model has "
            f"{[num_layers, num_kv_heads, head_dim]}",
        )
