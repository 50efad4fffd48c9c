"""ClauseSplitter: pieces end at sentence ends, at clause breaks once long enough (any break for the first
piece), or at a word limit that starts small and grows with the words already cut, as the text streams."""

from __future__ import annotations

from arbi_grpc.audio.splitter import ClauseSplitter


def split_streamed(text: str, step: int = 3, **options) -> list[str]:
    splitter = ClauseSplitter(**options)
    pieces = [piece for offset in range(0, len(text), step) for piece in splitter.push(text[offset:offset + step])]
    return pieces + ([tail] if (tail := splitter.flush()) else [])


def test_sentences_come_out_as_soon_as_they_end() -> None:
    splitter = ClauseSplitter()
    assert splitter.push("Paris is the capital.") == []  # no space yet: maybe "capital.com"
    assert splitter.push(" It is") == ["Paris is the capital."]
    assert splitter.flush() == "It is"


def test_the_first_piece_ends_after_a_few_words_and_later_limits_follow_the_words_cut() -> None:
    splitter = ClauseSplitter(first_piece_words=4)
    assert splitter.push("The capital of France") == []  # the fourth word may still be growing
    assert splitter.push(" is") == ["The capital of France"]
    text = "Bees make honey which is a sweet sticky substance that they produce from nectar in their hives every day"
    # limits: 4, then 3/4 of the words cut (at least 4): 4, 6, 10; never after "the", "of", "their", ...
    assert split_streamed(text, first_piece_words=4) == ["Bees make honey which is", "a sweet sticky substance",
                                    "that they produce from nectar in their hives", "every day"]
    assert split_streamed(text, first_piece_words=2)[:3] == ["Bees make", "honey which is", "a sweet sticky substance"]


def test_the_first_clause_break_ends_the_first_piece_later_short_clauses_do_not() -> None:
    text = "Well, the city of lights has museums, cafes and parks, and many visitors every year."
    assert split_streamed(text, first_piece_words=100) == [
        "Well,", "the city of lights has museums,", "cafes and parks, and many visitors every year."]
    assert split_streamed(text) == ["Well,", "the city of lights", "has museums, cafes and parks,",
                                    "and many visitors every year."]
    assert " ".join(split_streamed(text)) == text


def test_abbreviations_and_initials_end_neither_a_sentence_nor_a_word_limited_piece() -> None:
    assert split_streamed("Dr. Smith met J. Doe at noon. Then they left.", first_piece_words=4) == [
        "Dr. Smith met J. Doe", "at noon.", "Then they left."]
    assert split_streamed("Dr. Smith met J. Doe at noon.", first_piece_words=100) == [
        "Dr. Smith met J. Doe at noon."]


def test_question_and_exclamation_marks_end_sentences() -> None:
    assert split_streamed("Really? Yes! Of course.") == ["Really?", "Yes!", "Of course."]


def test_whatever_is_pushed_comes_out_once() -> None:
    text = "One, two, three: four; five. Six! Seven? Eight, nine and ten, eleven and twelve."
    assert " ".join(split_streamed(text, step=1)) == text
    long = " ".join(f"word{index}" for index in range(100))
    assert " ".join(split_streamed(long, step=1)) == long
