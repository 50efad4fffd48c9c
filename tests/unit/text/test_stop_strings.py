"""StopStringMatcher: stops at the first completed stop string whatever the push boundaries are."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.text.stop_strings import StopCheck, StopStringMatcher

ALPHABET = "ab😀é\n"


def reference(text: str, stop_strings: list[str]) -> tuple[str, bool]:
    """Scan end positions in order; at the first where some stop string ends, cut before the longest one."""
    for end in range(len(text) + 1):
        ending = [stop for stop in stop_strings if text[:end].endswith(stop)]
        if ending:
            return text[: end - max(len(stop) for stop in ending)], True
    return text, False


def run_in_pieces(stop_strings: list[str], pieces: list[str]) -> tuple[str, bool]:
    matcher = StopStringMatcher(stop_strings)
    emitted = []
    for piece in pieces:
        check = matcher.push(piece)
        emitted.append(check.emit)
        if check.stopped:
            return "".join(emitted), True
    return "".join(emitted) + matcher.flush(), False


@st.composite
def split_text(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = draw(st.text(alphabet=ALPHABET, max_size=40))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    bounds = [0, *cuts, len(text)]
    return text, [text[start:end] for start, end in zip(bounds, bounds[1:])]


@given(
    stop_strings=st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=4), max_size=4),
    text_and_pieces=split_text(),
)
def test_any_split_matches_reference(stop_strings: list[str], text_and_pieces: tuple[str, list[str]]) -> None:
    text, pieces = text_and_pieces
    assert run_in_pieces(stop_strings, pieces) == reference(text, stop_strings)


@given(
    prefix=st.text(alphabet=ALPHABET, max_size=20),
    stop=st.text(alphabet=ALPHABET, min_size=1, max_size=6),
    suffix=st.text(alphabet=ALPHABET, max_size=20),
)
def test_one_character_pushes_stop_at_embedded_stop(prefix: str, stop: str, suffix: str) -> None:
    text = prefix + stop + suffix
    emitted, stopped = run_in_pieces([stop], list(text))
    assert stopped
    assert emitted == text[: text.index(stop)]


def test_spanning_token_edges_holds_then_stops() -> None:
    matcher = StopStringMatcher(["</answer>"])
    assert matcher.push("The end</") == StopCheck(emit="The end", stopped=False)
    assert matcher.push("ans") == StopCheck(emit="", stopped=False)
    assert matcher.push("wer> ignored") == StopCheck(emit="", stopped=True)
    assert matcher.push("more") == StopCheck(emit="", stopped=True)
    assert matcher.flush() == ""


def test_held_text_is_released_when_the_prefix_breaks_or_generation_ends() -> None:
    matcher = StopStringMatcher(["STOP"])
    assert matcher.push("go ST") == StopCheck(emit="go ", stopped=False)
    assert matcher.push("OX S") == StopCheck(emit="STOX ", stopped=False)
    assert matcher.flush() == "S"


def test_earliest_completed_stop_wins_over_earlier_start() -> None:
    matcher = StopStringMatcher(["abcd", "bc"])
    assert matcher.push("xab") == StopCheck(emit="x", stopped=False)
    assert matcher.push("cd") == StopCheck(emit="a", stopped=True)


def test_no_stop_strings_passes_text_through() -> None:
    matcher = StopStringMatcher([])
    assert matcher.push("anything") == StopCheck(emit="anything", stopped=False)


def test_empty_stop_string_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="must not be empty") as caught:
        StopStringMatcher(["ok", ""])
    assert caught.value.field == "stopping.stop_strings"
