"""ClauseSplitter: pieces end at sentence ends, or at clause breaks once long enough, as the text streams."""

from __future__ import annotations

from arbi_grpc.audio.splitter import ClauseSplitter


def split_streamed(text: str, step: int = 3) -> list[str]:
    splitter = ClauseSplitter()
    pieces = [piece for offset in range(0, len(text), step) for piece in splitter.push(text[offset:offset + step])]
    return pieces + ([tail] if (tail := splitter.flush()) else [])


def test_sentences_come_out_as_soon_as_they_end() -> None:
    splitter = ClauseSplitter()
    assert splitter.push("The capital of France is Paris.") == []  # no space yet: maybe "Paris.com"
    assert splitter.push(" It is") == ["The capital of France is Paris."]
    assert splitter.flush() == "It is"


def test_long_clauses_are_cut_at_commas_short_ones_are_not() -> None:
    text = "Well, the city of lights has museums, cafes and parks, and many visitors every year."
    assert split_streamed(text) == ["Well, the city of lights has museums,",
                                    "cafes and parks, and many visitors every year."]
    assert " ".join(split_streamed(text)) == text


def test_abbreviations_and_initials_do_not_end_a_sentence() -> None:
    assert split_streamed("Dr. Smith met J. Doe at noon. Then they left.") == [
        "Dr. Smith met J. Doe at noon.", "Then they left."]


def test_question_and_exclamation_marks_end_sentences() -> None:
    assert split_streamed("Really? Yes! Of course.") == ["Really?", "Yes!", "Of course."]


def test_whatever_is_pushed_comes_out_once() -> None:
    text = "One, two, three: four; five. Six! Seven? Eight, nine and ten, eleven and twelve."
    assert " ".join(split_streamed(text, step=1)) == text
