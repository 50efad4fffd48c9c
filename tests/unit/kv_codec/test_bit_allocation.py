"""Operating points and the greedy per-layer allocation around them."""

from __future__ import annotations

import random

import pytest

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec.calibration.bit_allocation import (
    KEYS,
    VALUES,
    average_bits,
    greedy_allocation,
    moved,
    neighbour_widths,
    operating_point,
    sensitivity_swaps,
)


@pytest.mark.parametrize(
    "average, point", [(3.5, (4, 3)), (4.0, (4, 4)), (3.0, (3, 3)), (2.5, (3, 2)), (4.5, (5, 4)), (7.0, (8, 6))]
)
def test_operating_point_keeps_the_average_with_keys_first(average, point):
    assert operating_point(average) == point


@pytest.mark.parametrize("average", [1.5, 3.25, 8.5, 7.5])
def test_unreachable_average_is_refused(average):
    with pytest.raises(InvalidArgumentError, match="avg_bits"):
        operating_point(average)


def test_neighbour_widths_skip_unsupported_widths():
    assert neighbour_widths(2) == (2, 3)
    assert neighbour_widths(4) == (3, 4, 5)
    assert neighbour_widths(6) == (5, 6, 8)
    assert neighbour_widths(8) == (6, 8)


def _costs(layers: int, sensitivity: dict[tuple[int, str], float]) -> dict[tuple[int, str, int], float]:
    """Cost of a slot at b bits: its sensitivity * 4^-b (each bit quarters the squared error)."""
    return {
        (layer, kind, bits): sensitivity[(layer, kind)] * 4.0**-bits
        for layer in range(layers) for kind in (KEYS, VALUES) for bits in range(2, 9)
    }


def test_allocation_spends_the_operating_point_budget_and_keeps_keys_at_least_values():
    rng = random.Random(5)
    layers = 12
    sensitivity = {(layer, kind): rng.uniform(0.1, 10.0) for layer in range(layers) for kind in (KEYS, VALUES)}
    allocation = greedy_allocation(_costs(layers, sensitivity), layers, 3.5)
    assert average_bits(allocation) == 3.5
    assert all(k >= v for k, v in allocation)
    assert all(k in (3, 4, 5) and v in (2, 3, 4) for k, v in allocation)


def test_allocation_moves_bits_from_insensitive_to_sensitive_slots():
    layers = 4
    sensitivity = {(layer, kind): 1.0 for layer in range(layers) for kind in (KEYS, VALUES)}
    sensitivity[(2, KEYS)] = 100.0  # keys of layer 2 matter most
    sensitivity[(0, KEYS)] = 0.01  # keys of layer 0 hardly matter
    allocation = greedy_allocation(_costs(layers, sensitivity), layers, 4.0)
    assert allocation[2][0] == 5
    assert allocation[0][0] == 3
    assert average_bits(allocation) == 4.0


def test_flat_costs_keep_the_uniform_point_reachable():
    layers = 3
    costs = _costs(layers, {(layer, kind): 1.0 for layer in range(layers) for kind in (KEYS, VALUES)})
    allocation = greedy_allocation(costs, layers, 4.0)
    assert average_bits(allocation) == 4.0


def test_missing_cost_is_named():
    costs = _costs(2, {(layer, kind): 1.0 for layer in range(2) for kind in (KEYS, VALUES)})
    del costs[(1, VALUES, 4)]
    with pytest.raises(InvalidArgumentError, match="layer 1 V at 4 bits"):
        greedy_allocation(costs, 2, 3.5)


def test_swaps_pair_the_most_and_least_sensitive_slots_until_they_meet():
    changes = {(0, KEYS): 0.5, (0, VALUES): -0.1, (1, KEYS): 0.2, (1, VALUES): 0.01, (2, KEYS): 0.3, (2, VALUES): 0.0}
    pairs = [((0, KEYS), (0, VALUES)), ((2, KEYS), (2, VALUES)), ((1, KEYS), (1, VALUES))]
    assert sensitivity_swaps(changes, 3.5) == pairs


def test_moved_keeps_the_budget_and_refuses_values_above_keys():
    uniform = [(4, 3)] * 3
    swapped = moved(uniform, (1, VALUES), (0, KEYS))
    assert swapped == [(3, 3), (4, 4), (4, 3)]
    assert average_bits(swapped) == 3.5
    assert moved(swapped, (0, VALUES), (2, KEYS)) is None  # layer 0 would hold K3V4
    assert moved([(2, 2)], (0, KEYS), (0, VALUES)) is None  # no width below 2
