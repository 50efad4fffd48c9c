"""`arbi-serve calibrate` end to end on a tiny random model: windows, bundle, fingerprint, allocation report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from arbi_grpc.cli import main
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration
from arbi_grpc.kv_codec.calibration.fingerprint import model_dir_fingerprint
from arbi_grpc.kv_codec.calibration.run import CalibrationSettings, run_calibration, text_windows
from tests.unit.kv_codec.tiny_model import CORPUS, TINY_HEAD_DIM, TINY_KV_HEADS, TINY_LAYERS, write_tiny_model

WINDOW = 32


@pytest.fixture
def model_dir(tmp_path: Path, generator: torch.Generator) -> Path:
    return write_tiny_model(tmp_path / "model", generator)


@pytest.fixture
def text_path(tmp_path: Path) -> Path:
    path = tmp_path / "calibration.txt"
    path.write_text(CORPUS * 3)
    return path


def test_text_windows_are_consecutive_and_capped():
    windows = text_windows(list(range(100)), 30, 2)
    assert windows.tolist() == [list(range(30)), list(range(30, 60))]
    with pytest.raises(InvalidArgumentError, match="do not fill one window"):
        text_windows(list(range(10)), 30, 2)


def test_uniform_bits_write_a_bundle_for_this_model(model_dir, text_path, tmp_path):
    settings = CalibrationSettings(None, (4, 3), group_size=8, window=WINDOW, max_windows=3)
    report = run_calibration(model_dir, text_path, settings, tmp_path / "bundle")
    calibration = TkvCalibration.load(tmp_path / "bundle", model_dir_fingerprint(model_dir))
    assert calibration.layer_bits == ((4, 3),) * TINY_LAYERS
    assert calibration.key_scales.shape == (TINY_LAYERS, TINY_KV_HEADS, TINY_HEAD_DIM)
    assert calibration.group_size == 8 and calibration.sink_tokens == 1
    assert report["calibration_windows"] == 3 and report["average_bits"] == 3.5
    assert not bool((calibration.key_shifts == 0).all())  # calibrated, not the uniform placeholder


def test_average_bits_allocation_keeps_the_budget_and_reports_both_dev_divergences(model_dir, text_path, tmp_path):
    settings = CalibrationSettings(3.5, None, group_size=8, window=WINDOW, max_windows=3, dev_windows=1)
    report = run_calibration(model_dir, text_path, settings, tmp_path / "bundle")
    calibration = TkvCalibration.load(tmp_path / "bundle", model_dir_fingerprint(model_dir))
    assert calibration.average_bits() == 3.5
    assert all(k >= v for k, v in calibration.layer_bits)
    assert report["kept"] in ("allocated", "swapped", "uniform")
    kept = report[f"dev_kl_{report['kept']}"]
    assert 0 < kept <= min(report["dev_kl_uniform"], report["dev_kl_allocated"], report["dev_kl_swapped"])
    assert report["swapped_bits"] and report["allocated_bits"]
    assert set(report["dev_kl_change_one_width_off"]) == {"0K", "0V", "1K", "1V"}


@pytest.mark.parametrize(
    "settings, match",
    [
        (dict(average_bits=3.5, uniform_bits=(4, 4)), "either an average"),
        (dict(average_bits=3.25), "not one of"),
        (dict(average_bits=None, uniform_bits=(4, 7)), "kv_bits"),
        (dict(window=2, sink_tokens=1), "window"),
        (dict(dev_windows=0), "at least one"),
    ],
)
def test_bad_settings_are_refused(settings, match):
    with pytest.raises(InvalidArgumentError, match=match):
        CalibrationSettings(**settings)


def test_cli_writes_the_bundle_and_prints_the_report(model_dir, text_path, tmp_path, capsys):
    output = tmp_path / "cli-bundle"
    code = main([
        "calibrate", "--model", str(model_dir), "--calibration-text", str(text_path), "--kv-bits", "4",
        "--group-size", "8", "--window", str(WINDOW), "--max-windows", "2", "--output", str(output),
    ])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["layer_bits"] == [[4, 4]] * TINY_LAYERS and report["bundle"] == str(output)
    TkvCalibration.load(output, model_dir_fingerprint(model_dir))


def test_cli_refuses_unreadable_text(model_dir, tmp_path, capsys):
    code = main(["calibrate", "--model", str(model_dir), "--calibration-text", str(tmp_path / "missing.txt"),
                 "--output", str(tmp_path / "b")])
    assert code == 2
    assert "calibration_text" in capsys.readouterr().err
