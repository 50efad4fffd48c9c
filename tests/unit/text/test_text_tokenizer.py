"""TextTokenizer: loading a model directory, special-token facts, encode/decode, load errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from arbi_grpc.errors import ModelLoadError
from arbi_grpc.text.tokenizer import TextTokenizer
from tests.unit.text.conftest import CORPUS, train_byte_level_bpe, write_model_dir


def random_text(rng: random.Random, length: int) -> str:
    alphabet = "".join(CORPUS)
    return "".join(rng.choice(alphabet) for _ in range(length))


def test_special_token_facts_merge_tokenizer_and_generation_config(byte_level_tokenizer: TextTokenizer) -> None:
    im_start, im_end = 1, 2  # trainer order: <|endoftext|>, <|im_start|>, <|im_end|>
    assert byte_level_tokenizer.bos_token_id == im_start
    assert byte_level_tokenizer.eos_token_ids == frozenset({0, im_end})
    assert byte_level_tokenizer.eos_token == "<|im_end|>"
    assert all(byte_level_tokenizer.is_special(token_id) for token_id in (0, 1, 2))
    assert not byte_level_tokenizer.is_special(byte_level_tokenizer.encode("the")[0])
    assert byte_level_tokenizer.vocab_size == len(train_byte_level_bpe().get_vocab())
    assert byte_level_tokenizer.id_to_token(2) == "<|im_end|>"
    assert byte_level_tokenizer.id_to_token(10**6) is None


def test_round_trip_and_special_tokens_in_text(byte_level_tokenizer: TextTokenizer) -> None:
    rng = random.Random()
    text = random_text(rng, rng.randint(1, 200))
    ids = byte_level_tokenizer.encode(text)
    assert byte_level_tokenizer.decode(ids) == text
    framed = byte_level_tokenizer.encode("<|im_start|>" + text + "<|im_end|>")
    assert framed[0] == 1 and framed[-1] == 2
    assert byte_level_tokenizer.decode(framed) == text
    assert byte_level_tokenizer.decode(framed, skip_special_tokens=False) == "<|im_start|>" + text + "<|im_end|>"


def test_add_special_tokens_prepends_bos_once(metaspace_tokenizer: TextTokenizer) -> None:
    bos = metaspace_tokenizer.bos_token_id
    plain = metaspace_tokenizer.encode("hello world")
    assert plain[0] != bos
    assert metaspace_tokenizer.encode("hello world", add_special_tokens=True) == [bos, *plain]
    assert metaspace_tokenizer.encode("<s>hello world", add_special_tokens=True).count(bos) == 1


def test_add_bos_token_false_never_prepends(byte_level_tokenizer: TextTokenizer) -> None:
    assert byte_level_tokenizer.encode("hi", add_special_tokens=True) == byte_level_tokenizer.encode("hi")


def test_added_tokens_decoder_entries_missing_from_tokenizer_json_are_registered(tmp_path: Path) -> None:
    backend = train_byte_level_bpe()
    next_id = backend.get_vocab_size()
    config = {
        "eos_token": "<|im_end|>",
        "added_tokens_decoder": {str(next_id): {"content": "<tool_call>", "special": True}},
    }
    tokenizer = TextTokenizer.from_model_dir(write_model_dir(tmp_path, backend, config))
    assert tokenizer.encode("a<tool_call>b")[1] == next_id
    assert tokenizer.is_special(next_id)
    assert tokenizer.vocab_size == next_id + 1
    assert tokenizer.decode(tokenizer.encode("a<tool_call>b")) == "ab"


def test_eos_only_from_generation_config_is_special(tmp_path: Path) -> None:
    directory = write_model_dir(tmp_path, train_byte_level_bpe(), {}, {"eos_token_id": 5, "bos_token_id": 1})
    tokenizer = TextTokenizer.from_model_dir(directory)
    assert tokenizer.eos_token_ids == frozenset({5})
    assert tokenizer.bos_token_id == 1
    assert tokenizer.is_special(5)
    assert tokenizer.decode([5]) == ""


def test_chat_template_file_is_read_when_config_has_none(tmp_path: Path) -> None:
    directory = write_model_dir(tmp_path, train_byte_level_bpe(), {"eos_token": "<|im_end|>"})
    (directory / "chat_template.jinja").write_text("{{ messages[0]['content'] }}", encoding="utf-8")
    assert TextTokenizer.from_model_dir(directory).chat_template == "{{ messages[0]['content'] }}"


def test_named_chat_templates_use_the_default_one(tmp_path: Path) -> None:
    templates = [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "chat"}]
    directory = write_model_dir(tmp_path, train_byte_level_bpe(), {"chat_template": templates})
    assert TextTokenizer.from_model_dir(directory).chat_template == "chat"


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: (d / "tokenizer.json").unlink(), "tokenizer.json: missing"),
        (lambda d: (d / "tokenizer.json").write_text("{not json"), "tokenizer.json: not a valid"),
        (lambda d: (d / "tokenizer_config.json").unlink(), "tokenizer_config.json: missing"),
        (lambda d: (d / "tokenizer_config.json").write_text("[1, 2"), "tokenizer_config.json: unreadable"),
        (lambda d: (d / "tokenizer_config.json").write_text("[1, 2]"), "expected a JSON object"),
        (lambda d: (d / "generation_config.json").write_bytes(b"\xff\xfe"), "generation_config.json: unreadable"),
        (
            lambda d: (d / "generation_config.json").write_text(json.dumps({"eos_token_id": "2"})),
            "eos_token_id must be an int",
        ),
        (
            lambda d: (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<nope>"})),
            "eos_token '<nope>' is not in the vocabulary",
        ),
        (
            lambda d: (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": 3})),
            "chat_template must be a string",
        ),
        (
            lambda d: (d / "tokenizer_config.json").write_text(
                json.dumps({"added_tokens_decoder": {"9000": {"content": "<x>"}}})
            ),
            "has id 9000",
        ),
    ],
)
def test_missing_or_corrupt_files_raise_model_load_error(tmp_path: Path, damage, message: str) -> None:
    directory = write_model_dir(tmp_path, train_byte_level_bpe(), {"eos_token": "<|im_end|>"}, {"eos_token_id": 2})
    damage(directory)
    with pytest.raises(ModelLoadError, match=message):
        TextTokenizer.from_model_dir(directory)


def test_smollm2_tokenizer_facts(smollm2_tokenizer: TextTokenizer) -> None:
    assert smollm2_tokenizer.vocab_size == 49152
    assert smollm2_tokenizer.bos_token_id == 1
    assert smollm2_tokenizer.eos_token_ids == frozenset({2})
    assert [smollm2_tokenizer.is_special(token_id) for token_id in (0, 16, 17)] == [True, True, False]
    text = "Hello 12345 world! 😀 你好"
    assert smollm2_tokenizer.decode(smollm2_tokenizer.encode(text)) == text
