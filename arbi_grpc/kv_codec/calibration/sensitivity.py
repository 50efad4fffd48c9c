"""Per-slot TKV sensitivity measured around an operating point (a slot is one layer's keys or its values).

For each slot, a dev measure (calibrate uses the mean KL divergence from the exact-K/V model) is taken with
every slot at the operating point except this one, which goes one supported width lower (K4V3 -> that layer's
keys at 3 bits; a slot already at 2 bits goes one width higher instead). With e(b) the slot's round-trip squared error at b bits on the calibration samples,
the slot's cost is modelled as linear in its error around the point: cost(b) = c * e(b), where c is the
measured change over the error change (never negative). So the costs carry the interactions of the real
operating point, not those of an 8-bit background, and cost one dev forward pass per slot (2 * layers passes,
plus one at the point itself).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from arbi_grpc.kv_codec.calibration.bit_allocation import KEYS, VALUES, Slot, neighbour_widths, operating_point

# layer_bits -> dev measure (loss or divergence) with every K/V through the codec at those bits
DevMeasure = Callable[[Sequence[tuple[int, int]]], float]
# (layer, KEYS | VALUES, bits) -> round-trip squared error of that slot at that width
SlotError = Callable[[int, str, int], float]
_ERROR_FLOOR = 1e-12


def probe_width(point_bits: int) -> int:
    """The width a slot at `point_bits` is measured at: one supported width lower, or higher at the bottom."""
    widths = neighbour_widths(point_bits)
    return widths[0] if widths[0] < point_bits else widths[-1]


def operating_point_costs(
    dev_measure: DevMeasure, slot_error: SlotError, num_layers: int, average_bits: float
) -> tuple[dict[tuple[int, str, int], float], dict[Slot, float]]:
    """(costs for greedy_allocation at every neighbour width of the point, the measured change per slot)."""
    point = operating_point(average_bits)
    uniform = [point] * num_layers
    reference = dev_measure(uniform)
    costs: dict[tuple[int, str, int], float] = {}
    measured: dict[Slot, float] = {}
    for layer in range(num_layers):
        for kind, point_bits in ((KEYS, point[0]), (VALUES, point[1])):
            probe = probe_width(point_bits)
            layer_bits = list(uniform)
            layer_bits[layer] = (probe, point[1]) if kind == KEYS else (point[0], probe)
            change = dev_measure(layer_bits) - reference
            measured[(layer, kind)] = change
            error_change = slot_error(layer, kind, probe) - slot_error(layer, kind, point_bits)
            if probe > point_bits:
                change, error_change = -change, -error_change
            coefficient = max(change, 0.0) / max(error_change, _ERROR_FLOOR)
            for bits in neighbour_widths(point_bits):
                costs[(layer, kind, bits)] = coefficient * slot_error(layer, kind, bits)
    return costs, measured
