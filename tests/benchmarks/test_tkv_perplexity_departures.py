"""Where a greedy generation leaves the reference's: the reference's margin there and whether the runner-up was
taken (tkv_perplexity's near-tie report)."""

from __future__ import annotations

from benchmarks.tkv_perplexity import GreedyToken, departures


def _tokens(ids: list[int], runner_ups: list[int], margins: list[float]) -> list[GreedyToken]:
    return [GreedyToken(*fields) for fields in zip(ids, runner_ups, margins)]


def test_departures_report_the_reference_margin_at_the_first_different_token() -> None:
    reference = [
        _tokens([1, 2, 3], [9, 8, 7], [2.0, 0.05, 1.0]),
        _tokens([4, 5, 6], [9, 9, 9], [1.0, 1.0, 1.0]),
        _tokens([7, 8], [1, 2], [0.5, 3.0]),
    ]
    generations = [
        _tokens([1, 8, 4], [0, 0, 0], [0.0, 0.0, 0.0]),  # leaves at token 1 for the reference's runner-up
        _tokens([4, 5, 6], [0, 0, 0], [0.0, 0.0, 0.0]),  # identical: no departure
        _tokens([3, 8], [0, 0], [0.0, 0.0]),  # leaves at token 0 for another token
    ]
    assert departures(generations, reference) == [(0.05, True), (0.5, False)]
