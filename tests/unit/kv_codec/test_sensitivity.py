"""Operating-point sensitivity: one measured dev loss per slot, scaled by the slot's round-trip error."""

from __future__ import annotations

import pytest

from arbi_grpc.kv_codec.calibration.bit_allocation import KEYS, VALUES, greedy_allocation
from arbi_grpc.kv_codec.calibration.sensitivity import operating_point_costs, probe_width

LAYERS = 5


def _error(layer: int, kind: str, bits: int) -> float:
    return 4.0**-bits


def _weights() -> dict[tuple[int, str], float]:
    weights = {(layer, kind): 1.0 for layer in range(LAYERS) for kind in (KEYS, VALUES)}
    weights[(3, KEYS)] = 40.0
    weights[(1, VALUES)] = 0.05
    return weights


def _true_loss(layer_bits) -> float:
    """A loss that is additive in the slots' errors, with slot weights _weights()."""
    weights = _weights()
    return sum(
        weights[(layer, KEYS)] * _error(layer, KEYS, k) + weights[(layer, VALUES)] * _error(layer, VALUES, v)
        for layer, (k, v) in enumerate(layer_bits)
    )


@pytest.mark.parametrize("point_bits, probe", [(4, 3), (3, 2), (2, 3), (8, 6)])
def test_probe_width_is_one_supported_width_off(point_bits, probe):
    assert probe_width(point_bits) == probe


def test_costs_recover_an_additive_loss_and_measure_each_slot_once():
    calls: list[tuple] = []

    def dev_loss(layer_bits):
        calls.append(tuple(layer_bits))
        return _true_loss(layer_bits)

    costs, measured = operating_point_costs(dev_loss, _error, LAYERS, 3.5)
    assert len(calls) == 2 * LAYERS + 1
    assert set(measured) == {(layer, kind) for layer in range(LAYERS) for kind in (KEYS, VALUES)}
    weights = _weights()
    for (layer, kind, bits), cost in costs.items():
        assert cost == pytest.approx(weights[(layer, kind)] * _error(layer, kind, bits))
    allocation = greedy_allocation(costs, LAYERS, 3.5)
    assert allocation[3][0] == 5  # the heavy keys get the extra bit
    assert _true_loss(allocation) < _true_loss([(4, 3)] * LAYERS)


def test_a_slot_that_does_not_hurt_gets_zero_cost():
    costs, _ = operating_point_costs(lambda layer_bits: 1.0, _error, 2, 4.0)
    assert all(cost == 0.0 for cost in costs.values())
