"""TkvCalibration: building it from activations, the bundle round trip, and refusing foreign or damaged bundles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from arbi_grpc.errors import InvalidArgumentError, ModelLoadError
from arbi_grpc.kv_codec import (
    TkvCalibration,
    TkvSpec,
    calibrate_channels,
    calibrate_tkv,
    hadamard_rotate,
    query_channel_weights,
)
from arbi_grpc.kv_codec.calibration.bundle import METADATA_FILE, TENSORS_FILE
from arbi_grpc.kv_codec.calibration.channel_transforms import ChannelRecipe

LAYERS, HEADS, HEAD_DIM = 3, 2, 64


def _activations(generator: torch.Generator, tokens: int = 96) -> list[torch.Tensor]:
    channel_magnitude = torch.exp(torch.randn(HEADS, HEAD_DIM, generator=generator))  # uneven channels
    channel_offset = torch.randn(HEADS, HEAD_DIM, generator=generator) * 3
    return [
        torch.randn(tokens, HEADS, HEAD_DIM, generator=generator) * channel_magnitude + channel_offset
        for _ in range(LAYERS)
    ]


def _calibration(generator: torch.Generator, fingerprint: str = "tkvfp1:model-a") -> TkvCalibration:
    keys, values = _activations(generator), _activations(generator)
    return calibrate_tkv(
        keys, values, [(4, 4), (3, 2), (8, 5)], 32, fingerprint, rotate=True,
        key_recipe=ChannelRecipe("sqrt_max"), value_recipe=ChannelRecipe("sqrt_max"), sink_tokens=2,
    )


def test_bundle_round_trip(tmp_path: Path, generator: torch.Generator) -> None:
    calibration = _calibration(generator)
    calibration.save(tmp_path)
    loaded = TkvCalibration.load(tmp_path, calibration.model_fingerprint)
    assert loaded.layer_bits == ((4, 4), (3, 2), (8, 5))
    assert (loaded.group_size, loaded.rotate, loaded.method) == (32, True, "K:sqrt_max+center V:sqrt_max+center")
    for name in ("key_scales", "value_scales", "key_shifts", "value_shifts"):
        assert torch.equal(getattr(loaded, name), getattr(calibration, name))
    assert bool(calibration.key_shifts.abs().sum() > 0)
    assert loaded.sink_tokens == 2
    assert loaded.layer_codec(1).spec == TkvSpec(3, 2, 32, sink_tokens=2)
    assert loaded.average_bits() == pytest.approx(26 / 6)


def test_foreign_bundle_is_refused_naming_both_fingerprints(tmp_path: Path, generator: torch.Generator) -> None:
    _calibration(generator, "tkvfp1:model-a").save(tmp_path)
    with pytest.raises(InvalidArgumentError) as caught:
        TkvCalibration.load(tmp_path, "tkvfp1:model-b")
    assert "tkvfp1:model-a" in str(caught.value) and "tkvfp1:model-b" in str(caught.value)


@pytest.mark.parametrize(
    "damage",
    ["truncate_scales", "flip_scale_byte", "bad_json", "missing_json", "bits_7", "wrong_format", "no_sink_key"],
)
def test_corrupt_bundle_raises_model_load_error(tmp_path: Path, damage: str, generator: torch.Generator) -> None:
    calibration = _calibration(generator)
    calibration.save(tmp_path)
    scales, metadata_path = tmp_path / TENSORS_FILE, tmp_path / METADATA_FILE
    metadata = json.loads(metadata_path.read_text())
    if damage == "truncate_scales":
        scales.write_bytes(scales.read_bytes()[:-40])
    elif damage == "flip_scale_byte":
        raw = bytearray(scales.read_bytes())
        raw[-3] ^= 0xFF
        scales.write_bytes(bytes(raw))
    elif damage == "bad_json":
        metadata_path.write_text(metadata_path.read_text()[:-20])
    elif damage == "missing_json":
        metadata_path.unlink()
    elif damage == "bits_7":
        metadata["layer_bits"][0] = [7, 4]
        metadata_path.write_text(json.dumps(metadata))
    elif damage == "no_sink_key":
        del metadata["sink_tokens"]
        metadata_path.write_text(json.dumps(metadata))
    elif damage == "wrong_format":
        metadata["format"] = "something-else/9"
        metadata_path.write_text(json.dumps(metadata))
    with pytest.raises(ModelLoadError):
        TkvCalibration.load(tmp_path, calibration.model_fingerprint)


def test_calibration_validates_shapes_and_bits() -> None:
    ones, zeros = torch.ones(LAYERS, HEADS, HEAD_DIM), torch.zeros(LAYERS, HEADS, HEAD_DIM)
    with pytest.raises(InvalidArgumentError):
        TkvCalibration("fp", 32, True, ((4, 4),) * 2, ones, ones, zeros, zeros)
    with pytest.raises(InvalidArgumentError, match="kv_bits"):
        TkvCalibration("fp", 32, True, ((4, 7),) * LAYERS, ones, ones, zeros, zeros)
    with pytest.raises(InvalidArgumentError):
        TkvCalibration("fp", 32, True, ((4, 4),) * LAYERS, ones, ones * 0, zeros, zeros)
    with pytest.raises(InvalidArgumentError):
        TkvCalibration("fp", 32, True, ((4, 4),) * LAYERS, ones, ones, zeros[:, :1], zeros)
    with pytest.raises(InvalidArgumentError):
        TkvCalibration.uniform("fp", TkvSpec(), LAYERS, HEADS, HEAD_DIM).layer_codec(LAYERS)


@pytest.mark.parametrize("method", ["none", "sqrt_max", "mse"])
def test_channel_scales_are_positive_with_unit_geometric_mean(method: str, generator: torch.Generator) -> None:
    transform = calibrate_channels(_activations(generator)[0], 3, 32, rotate=False, method=method)
    assert transform.scale.shape == (HEADS, HEAD_DIM) and bool((transform.scale > 0).all())
    assert torch.allclose(transform.scale.log().mean(dim=-1), torch.zeros(HEADS), atol=1e-5)


def _round_trip_error(calibration: TkvCalibration, samples: torch.Tensor) -> float:
    return float((calibration.layer_codec(0).fake_quantize_keys(samples) - samples).pow(2).mean())


def test_mse_scales_do_not_lose_to_unit_scales(generator: torch.Generator) -> None:
    samples = _activations(generator, tokens=256)[0]
    errors = {
        method: _round_trip_error(
            calibrate_tkv([samples], [samples], [(3, 3)], 32, "fp", False, ChannelRecipe(method, False)), samples
        )
        for method in ("none", "mse")
    }
    assert errors["mse"] <= errors["none"] * (1 + 1e-6)
    assert errors["mse"] < errors["none"] * 0.9  # uneven channels: smoothing must pay off clearly


def test_centering_shift_is_the_rotated_mean_and_reduces_error(generator: torch.Generator) -> None:
    samples = _activations(generator, tokens=256)[0]
    transform = calibrate_channels(samples, 3, 32, rotate=True, method="none", center=True)
    assert torch.allclose(transform.shift, hadamard_rotate(samples).mean(dim=0), atol=1e-4)
    errors = {
        center: _round_trip_error(
            calibrate_tkv([samples], [samples], [(3, 3)], 32, "fp", True, ChannelRecipe("none", center)), samples
        )
        for center in (False, True)
    }
    assert errors[True] < errors[False]


def test_sqrt_max_scales_follow_channel_ranges(generator: torch.Generator) -> None:
    samples = _activations(generator)[0]
    scales = calibrate_channels(samples, 4, 32, rotate=True, method="sqrt_max", center=False).scale
    channel_range = hadamard_rotate(samples).abs().amax(dim=0)
    product = scales * channel_range.sqrt()  # constant per head when s ~ range^-1/2
    assert torch.allclose(product, product[:, :1].expand_as(product), rtol=1e-4)


def test_query_weights_average_query_heads_per_kv_head(generator: torch.Generator) -> None:
    queries = torch.randn(50, 4, HEAD_DIM, generator=generator)
    queries[:, 2:, 5] *= 10.0  # kv head 1's queries lean on channel 5
    weights = query_channel_weights(queries, num_kv_heads=2, rotate=False)
    assert weights.shape == (2, HEAD_DIM)
    assert torch.allclose(weights.mean(dim=-1), torch.ones(2))
    assert int(weights[1].argmax()) == 5 and float(weights[1, 5]) > 10 * float(weights[0, 5])
    with pytest.raises(InvalidArgumentError):
        query_channel_weights(queries, num_kv_heads=3)


def test_query_weighted_calibration_is_labelled(generator: torch.Generator) -> None:
    samples = _activations(generator, tokens=64)
    weights = [torch.ones(HEADS, HEAD_DIM)] * LAYERS
    calibration = calibrate_tkv(samples, samples, [(4, 4)] * LAYERS, 32, "fp", key_weights_per_layer=weights)
    assert calibration.method == "K:mse+center+qweighted V:none"


def test_default_recipes_calibrate_keys_and_leave_values_rotated_only(generator: torch.Generator) -> None:
    keys, values = _activations(generator), _activations(generator)
    calibration = calibrate_tkv(keys, values, [(4, 3)] * LAYERS, 32, "fp")
    assert calibration.method == "K:mse+center V:none"
    assert bool(calibration.key_shifts.abs().amax() > 0)
    assert torch.equal(calibration.value_scales, torch.ones_like(calibration.value_scales))
    assert torch.equal(calibration.value_shifts, torch.zeros_like(calibration.value_shifts))


def test_unknown_method_and_mismatched_layers_are_refused(generator: torch.Generator) -> None:
    samples = _activations(generator)
    with pytest.raises(InvalidArgumentError, match="kv_calibration_method"):
        calibrate_channels(samples[0], 4, 32, method="magic")
    with pytest.raises(InvalidArgumentError, match="kv_calibration_method"):
        ChannelRecipe("magic")
    with pytest.raises(InvalidArgumentError):
        calibrate_tkv(samples, samples[:2], [(4, 4)] * LAYERS, 32, "fp")
    with pytest.raises(InvalidArgumentError):
        calibrate_channels(samples[0][:0], 4, 32)
