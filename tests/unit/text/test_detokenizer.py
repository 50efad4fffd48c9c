"""IncrementalDetokenizer: streamed pieces equal the full decode, never split a character, stay O(1)."""

from __future__ import annotations

import random

import pytest

from arbi_grpc.text.detokenizer import MAX_PENDING_TOKENS, REPLACEMENT_CHARACTER, IncrementalDetokenizer
from arbi_grpc.text.tokenizer import TextTokenizer

SAMPLES = [
    "😀🎉👍🏽 🇫🇷 👨‍👩‍👧",
    "你好，世界。日本語のテキスト。한국어 문장",
    "Ça va très bien, naïve café, jalapeño, Größe",
    "Hello world, 12345 and   spaces\n\tand tabs",
]
MIXED_ALPHABET = "".join(SAMPLES) + "∑∫≈→←ñøß"


def stream(tokenizer: TextTokenizer, prompt_ids: list[int], output_ids: list[int]) -> list[str]:
    detokenizer = IncrementalDetokenizer(tokenizer, prompt_ids)
    pieces = [detokenizer.push(token_id) for token_id in output_ids]
    return [*pieces, detokenizer.flush()]


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice(MIXED_ALPHABET) for _ in range(rng.randint(1, 60)))


@pytest.mark.parametrize("tokenizer_name", ["byte_level_tokenizer", "smollm2_tokenizer"])
def test_pieces_concatenate_to_full_decode(tokenizer_name: str, request: pytest.FixtureRequest) -> None:
    tokenizer: TextTokenizer = request.getfixturevalue(tokenizer_name)
    rng = random.Random()
    for text in [*SAMPLES, *(random_text(rng) for _ in range(30))]:
        prompt_ids = tokenizer.encode(random_text(rng))
        output_ids = tokenizer.encode(text)
        pieces = stream(tokenizer, prompt_ids, output_ids)
        assert "".join(pieces) == tokenizer.decode(output_ids) == text
        assert all(REPLACEMENT_CHARACTER not in piece for piece in pieces), pieces


def test_multibyte_character_is_held_until_complete(smollm2_tokenizer: TextTokenizer) -> None:
    emoji_ids = smollm2_tokenizer.encode("😀")
    assert len(emoji_ids) > 1  # its bytes span several byte-level tokens
    pieces = stream(smollm2_tokenizer, [], emoji_ids)
    assert pieces[:-2] == [""] * (len(emoji_ids) - 1)
    assert pieces[-2:] == ["😀", ""]


def test_special_tokens_produce_no_text(smollm2_tokenizer: TextTokenizer) -> None:
    body = smollm2_tokenizer.encode("Paris is 😀 nice")
    output_ids = [1, *body[:3], 2, *body[3:], 2]
    assert "".join(stream(smollm2_tokenizer, [], output_ids)) == "Paris is 😀 nice"


def test_leading_space_tokens_decode_in_context(metaspace_tokenizer: TextTokenizer) -> None:
    """SentencePiece-style decoders strip a leading '▁' when a token is decoded alone; in context they must not."""
    rng = random.Random()
    words = ["the", "quick", "brown", "fox", "café", "lazy", "dog"]
    checked = 0
    for _ in range(20):
        prompt = " ".join(rng.choices(words, k=rng.randint(1, 5)))
        output = " " + " ".join(rng.choices(words, k=rng.randint(1, 8)))
        prompt_ids = metaspace_tokenizer.encode(prompt)
        output_ids = metaspace_tokenizer.encode(prompt + output)[len(prompt_ids) :]
        if metaspace_tokenizer.encode(prompt + output)[: len(prompt_ids)] != prompt_ids:
            continue  # the prompt's last word merged with the output's first
        pieces = stream(metaspace_tokenizer, prompt_ids, output_ids)
        assert "".join(pieces) == metaspace_tokenizer.decode(prompt_ids + output_ids)[len(prompt) :] == output
        checked += 1
    assert checked > 0


def test_prompt_ending_inside_a_character_gets_no_context(smollm2_tokenizer: TextTokenizer) -> None:
    emoji_ids = smollm2_tokenizer.encode("😀")
    text_ids = smollm2_tokenizer.encode(" and more")
    assert "".join(stream(smollm2_tokenizer, emoji_ids[:-1], text_ids)) == " and more"


def test_invalid_bytes_are_released_after_a_bounded_wait(smollm2_tokenizer: TextTokenizer) -> None:
    lead_byte_id = smollm2_tokenizer.encode("😀")[0]  # a lone UTF-8 lead byte never completes
    detokenizer = IncrementalDetokenizer(smollm2_tokenizer, [])
    pieces = [detokenizer.push(lead_byte_id) for _ in range(MAX_PENDING_TOKENS)]
    assert pieces[:-1] == [""] * (MAX_PENDING_TOKENS - 1)
    assert REPLACEMENT_CHARACTER in pieces[-1]


def test_window_stays_bounded(byte_level_tokenizer: TextTokenizer) -> None:
    rng = random.Random()
    output_ids = byte_level_tokenizer.encode(" ".join(random_text(rng) for _ in range(40)))
    detokenizer = IncrementalDetokenizer(byte_level_tokenizer, byte_level_tokenizer.encode(random_text(rng)))
    longest_window = 0
    for token_id in output_ids:
        detokenizer.push(token_id)
        longest_window = max(longest_window, len(detokenizer._window))
    assert longest_window <= 2 * MAX_PENDING_TOKENS


def test_a_generated_replacement_character_comes_out_by_flush(smollm2_tokenizer: TextTokenizer) -> None:
    text = "ok " + REPLACEMENT_CHARACTER
    output_ids = smollm2_tokenizer.encode(text)
    pieces = stream(smollm2_tokenizer, smollm2_tokenizer.encode("Say:"), output_ids)
    assert "".join(pieces) == smollm2_tokenizer.decode(output_ids) == text
