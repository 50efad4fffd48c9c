"""Per-layer TKV bit allocation for an average budget: the uniform operating point of the budget, and a greedy
allocation around it from per-slot sensitivity costs (a slot is one layer's keys or one layer's values).

The operating point of an average a is keys at the smallest supported width >= a and values at whatever keeps
the average (3.5 -> K4V3, 4.0 -> K4V4): the study found keys are the sensitive half. The greedy search only
moves each slot within one supported width of that point, keeps every layer's key bits >= its value bits,
and spends the exact bit budget of the operating point, so its result is directly comparable with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec.spec import SUPPORTED_BITS

KEYS, VALUES = "K", "V"
Slot = tuple[int, str]  # (layer, KEYS | VALUES)
# (layer, KEYS | VALUES, bits) -> estimated loss increase of that slot at that width
SlotCosts = Mapping[tuple[int, str, int], float]


def operating_point(average_bits: float) -> tuple[int, int]:
    """(key_bits, value_bits), both supported, averaging exactly `average_bits`, keys >= values."""
    key_bits = next((bits for bits in SUPPORTED_BITS if bits >= average_bits), None)
    value_bits = None if key_bits is None else 2 * average_bits - key_bits
    if key_bits is None or value_bits not in SUPPORTED_BITS:
        reachable = sorted({(k + v) / 2 for k in SUPPORTED_BITS for v in SUPPORTED_BITS if v <= k})
        raise InvalidArgumentError("avg_bits", f"{average_bits} is not one of {reachable}")
    return key_bits, int(value_bits)


def neighbour_widths(bits: int) -> tuple[int, ...]:
    """The supported widths at most one step away from `bits` (e.g. 4 -> (3, 4, 5), 6 -> (5, 6, 8))."""
    index = SUPPORTED_BITS.index(bits)
    return SUPPORTED_BITS[max(index - 1, 0) : index + 2]


def greedy_allocation(costs: SlotCosts, num_layers: int, average_bits: float) -> list[tuple[int, int]]:
    """Per-layer (key_bits, value_bits) with the operating point's total bits and the least summed cost.

    Every slot starts at the lowest of its neighbour widths; the upgrade with the largest cost reduction per
    added bit that fits the remaining budget and keeps key bits >= value bits is taken until none is left.
    Costs are made non-increasing in bits first (more bits never cost more). A slot whose cost at some
    neighbour width is missing raises InvalidArgumentError.
    """
    key_point, value_point = operating_point(average_bits)
    widths = {KEYS: neighbour_widths(key_point), VALUES: neighbour_widths(value_point)}
    slots = [(layer, kind) for layer in range(num_layers) for kind in (KEYS, VALUES)]
    cost_table = {slot: _monotone(costs, slot, widths[slot[1]]) for slot in slots}
    bits = {slot: widths[slot[1]][0] for slot in slots}
    budget = num_layers * (key_point + value_point) - sum(bits.values())
    while True:
        best: tuple[float, Slot, int] | None = None
        for slot, table in cost_table.items():
            for target, cost in table.items():
                added = target - bits[slot]
                if not 0 < added <= budget or not _keeps_order(bits, slot, target):
                    continue
                gain = (table[bits[slot]] - cost) / added
                if best is None or gain > best[0]:
                    best = (gain, slot, target)
        if best is None:
            break
        _, slot, target = best
        budget -= target - bits[slot]
        bits[slot] = target
    return [(bits[(layer, KEYS)], bits[(layer, VALUES)]) for layer in range(num_layers)]


def sensitivity_swaps(changes: Mapping[Slot, float], average_bits: float) -> list[tuple[Slot, Slot]]:
    """Candidate moves from the operating point, best first: the i-th most sensitive slot (largest measured
    change one width lower) one supported width up, paired with the i-th least sensitive slot one width down,
    where both steps move the same number of bits (so the pair keeps the budget)."""
    point = dict(zip((KEYS, VALUES), operating_point(average_bits)))
    ranked = sorted(changes, key=lambda slot: changes[slot])
    pairs = []
    for up, down in zip(reversed(ranked), ranked):
        if up == down or changes[up] <= changes[down]:
            break
        up_widths, down_widths = neighbour_widths(point[up[1]]), neighbour_widths(point[down[1]])
        if up_widths[-1] - point[up[1]] == point[down[1]] - down_widths[0] > 0:
            pairs.append((up, down))
    return pairs


def moved(layer_bits: Sequence[tuple[int, int]], up: Slot, down: Slot) -> list[tuple[int, int]] | None:
    """`layer_bits` with slot `up` one supported width higher and `down` one lower; None when a width does not
    exist or a layer would end with key bits < value bits."""
    bits = {(layer, kind): pair[i] for layer, pair in enumerate(layer_bits) for i, kind in enumerate((KEYS, VALUES))}
    for slot, step in ((up, 1), (down, -1)):
        index = SUPPORTED_BITS.index(bits[slot]) + step
        if not 0 <= index < len(SUPPORTED_BITS):
            return None
        bits[slot] = SUPPORTED_BITS[index]
    result = [(bits[(layer, KEYS)], bits[(layer, VALUES)]) for layer in range(len(layer_bits))]
    return result if all(k >= v for k, v in result) else None


def average_bits(layer_bits: Sequence[tuple[int, int]]) -> float:
    return sum(k + v for k, v in layer_bits) / (2 * len(layer_bits))


def _keeps_order(bits: dict[Slot, int], slot: Slot, target: int) -> bool:
    layer, kind = slot
    if kind == KEYS:
        return True
    return target <= bits[(layer, KEYS)]


def _monotone(costs: SlotCosts, slot: Slot, widths: tuple[int, ...]) -> dict[int, float]:
    table: dict[int, float] = {}
    running = math.inf
    for bits in widths:
        cost = costs.get((*slot, bits))
        if cost is None:
            raise InvalidArgumentError("kv_sensitivity", f"no cost for layer {slot[0]} {slot[1]} at {bits} bits")
        running = min(running, cost)
        table[bits] = running
    return table
