"""Tokenizer fixtures for the text tests: a byte-level BPE trained on a tiny multilingual corpus, a
SentencePiece-style one, and SmolLM2's real tokenizer (imported from its GGUF by the session fixture)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from arbi_grpc.text.tokenizer import TextTokenizer

CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "The quick brown fox jumps over the lazy dog. Ça va très bien, merci! Größe, naïve café, jalapeño.",
    "你好，世界。今天天气很好。日本語のテキストも少し。한국어 문장도 있습니다.",
    "Emoji time 😀🎉👍🏽 🇫🇷 and 👨‍👩‍👧 families; math ∑∫≈ and arrows →←.",
    "def main():\n    return 42  # code with    spaces\n\n",
]


def write_model_dir(
    directory: Path,
    backend: Tokenizer,
    tokenizer_config: dict[str, Any],
    generation_config: dict[str, Any] | None = None,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    backend.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config), encoding="utf-8")
    if generation_config is not None:
        (directory / "generation_config.json").write_text(json.dumps(generation_config), encoding="utf-8")
    return directory


def train_byte_level_bpe() -> Tokenizer:
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(CORPUS * 20, trainer)
    return backend


def train_metaspace_bpe() -> Tokenizer:
    """SentencePiece-style: '▁' marks word starts and the decoder strips the first one."""
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    backend.train_from_iterator(CORPUS * 20, trainer)
    return backend


@pytest.fixture(scope="session")
def byte_level_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = {
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "add_bos_token": False,
        "chat_template": CHATML_TEMPLATE,
    }
    directory = tmp_path_factory.mktemp("byte-level")
    return write_model_dir(directory, train_byte_level_bpe(), config, {"eos_token_id": [0, 2]})


@pytest.fixture(scope="session")
def byte_level_tokenizer(byte_level_dir: Path) -> TextTokenizer:
    return TextTokenizer.from_model_dir(byte_level_dir)


@pytest.fixture(scope="session")
def metaspace_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> TextTokenizer:
    config = {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True}
    directory = write_model_dir(tmp_path_factory.mktemp("metaspace"), train_metaspace_bpe(), config)
    return TextTokenizer.from_model_dir(directory)


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_dir: Path) -> TextTokenizer:
    """SmolLM2-135M-Instruct's real tokenizer and chat template, as the project's GGUF importer writes them."""
    return TextTokenizer.from_model_dir(smollm2_dir)
