"""CalibrationRunner: the engine's decoder with an observing attention backend, on a tiny random model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec.calibration.activations import CalibrationRunner, without_sink
from tests.unit.kv_codec.tiny_model import TINY_HEAD_DIM, TINY_KV_HEADS, TINY_LAYERS, write_tiny_model

WINDOW = 24


@pytest.fixture
def runner(tmp_path: Path, generator: torch.Generator) -> CalibrationRunner:
    return CalibrationRunner.load(write_tiny_model(tmp_path, generator))


def _windows(generator: torch.Generator, count: int = 3) -> torch.Tensor:
    return torch.randint(0, 300, (count, WINDOW), generator=generator)


def test_collect_records_every_layer_window_after_window(runner, generator):
    windows = _windows(generator)
    layers = runner.collect(windows)
    assert len(layers) == TINY_LAYERS
    for layer in layers:
        assert layer.keys.shape == (3 * WINDOW, TINY_KV_HEADS, TINY_HEAD_DIM)
        assert layer.values.shape == layer.keys.shape
    # window 1 alone gives the same keys as rows WINDOW..2*WINDOW of the batch run
    alone = runner.collect(windows[1:2])
    torch.testing.assert_close(alone[1].keys, layers[1].keys[WINDOW : 2 * WINDOW])


def test_identity_rewrite_keeps_the_losses_and_a_noisy_one_changes_them(runner, generator):
    windows = _windows(generator, 2)
    exact = runner.window_losses(windows)
    assert exact.shape == (2, WINDOW - 1)
    torch.testing.assert_close(runner.window_losses(windows, lambda layer, p, k, v: (k, v)), exact)
    seen_positions: list[torch.Tensor] = []

    def noisy(layer, positions, keys, values):
        seen_positions.append(positions)
        return keys + torch.randn_like(keys), values

    assert not torch.allclose(runner.window_losses(windows, noisy), exact)
    assert seen_positions[0].tolist() == list(range(WINDOW))


def test_divergence_is_zero_for_exact_kv_and_positive_for_noisy_kv(runner, generator):
    windows = _windows(generator, 2)
    reference = runner.window_log_probs(windows)
    assert reference.shape[:2] == (2, WINDOW - 1)
    torch.testing.assert_close(reference.exp().sum(dim=-1), torch.ones(2, WINDOW - 1))
    assert runner.mean_divergence(windows, reference, None) == pytest.approx(0.0, abs=1e-6)

    def noisy(layer, positions, keys, values):
        return keys, values + torch.randn_like(values)

    assert runner.mean_divergence(windows, reference, noisy) > 1e-4


def test_without_sink_drops_the_first_positions_of_each_window():
    samples = torch.arange(12.0).view(12, 1, 1)
    assert without_sink(samples, 4, 1).flatten().tolist() == [1, 2, 3, 5, 6, 7, 9, 10, 11]


def test_windows_must_be_two_dimensional(runner):
    with pytest.raises(InvalidArgumentError, match="calibration_windows"):
        runner.window_losses(torch.zeros(5, dtype=torch.int64))
