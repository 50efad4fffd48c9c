"""`arbi-serve calibrate` on the GPU: the engine's CUDA decoder (Triton norms/activations) collects the same K/V
as the CPU path, and an allocation run writes a valid bundle. Tiny random model; skipped without CUDA."""

from __future__ import annotations

from pathlib import Path

import torch

from arbi_grpc.kv_codec.calibration.activations import CalibrationRunner
from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration
from arbi_grpc.kv_codec.calibration.fingerprint import model_dir_fingerprint
from arbi_grpc.kv_codec.calibration.run import CalibrationSettings, run_calibration
from tests.unit.kv_codec.tiny_model import CORPUS, write_tiny_model


def test_cuda_collection_matches_the_cpu(tmp_path: Path):
    model_dir = write_tiny_model(tmp_path / "model", torch.Generator().manual_seed(3))
    windows = torch.randint(0, 300, (2, 48), generator=torch.Generator().manual_seed(4))
    on_cpu = CalibrationRunner.load(model_dir, "cpu").collect(windows)
    on_cuda = CalibrationRunner.load(model_dir, "cuda").collect(windows)
    for cpu_layer, cuda_layer in zip(on_cpu, on_cuda):
        torch.testing.assert_close(cuda_layer.keys, cpu_layer.keys, rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(cuda_layer.values, cpu_layer.values, rtol=1e-3, atol=1e-3)


def test_cuda_allocation_run_writes_a_bundle(tmp_path: Path):
    model_dir = write_tiny_model(tmp_path / "model", torch.Generator().manual_seed(5))
    text = tmp_path / "text.txt"
    text.write_text(CORPUS * 3)
    settings = CalibrationSettings(3.5, None, group_size=8, window=32, max_windows=3, dev_windows=1)
    report = run_calibration(model_dir, text, settings, tmp_path / "bundle", device="cuda")
    calibration = TkvCalibration.load(tmp_path / "bundle", model_dir_fingerprint(model_dir))
    assert calibration.average_bits() == 3.5 == report["average_bits"]
