"""The imported tokenizer.json against an independent llama.cpp-style BPE built from the GGUF metadata."""

from __future__ import annotations

import json
import random
from pathlib import Path

import gguf
import pytest
import regex
from tokenizers import Tokenizer

from arbi_grpc.models.gguf.importer import import_gguf
from arbi_grpc.models.model_cache import ResolvedModel

# llama.cpp's pre-tokenizer regex lists (llm_tokenizer_bpe), keyed by tokenizer.ggml.pre.
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
LLAMA3 = CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA_CPP_PRE = {"smollm": ([r"\p{N}", GPT2], False), "gpt-2": ([GPT2], False), "llama-bpe": ([LLAMA3], True),
                 "qwen2": ([QWEN2], False)}

FIXED_TEXTS = [
    "Hello world! It's 2024, isn't it? They'll say we've done 1234567 things.",
    "def f(x):\n    return x ** 2  # square\n\n\tprint(f'{x:>10}')\r\n",
    "Ünïcödé: naïve café, straße, Ελληνικά, русский, 中文字符, 日本語, 한국어, emoji 🙂🚀👍🏽",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "trailing spaces   \n\n\n   leading and  double  spaces<|endoftext|>",
    "numbers 3.14159 -42 1,000,000 0x1F 1e-5 ½ ² ٣ 四",
    "'S 'LL 'll ſ 'ſ CAPS'RE mixed's",
    "",
    " ",
    "\n",
]
PIECES = [
    "hello", " the", "The", " in", "12", "345", " ", "  ", "\n", "\n\n", "\t", "\r\n", "'s", "'T", "'ll", "é", "ß",
    "中", "文", "🙂", "👍🏽", "ſ", "x=y+1;", "{}", "()", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>",
    "<", "|", ">", "Ġ", "ĠĠ", "a̐", "٣", "½", "...", "—", "\u00a0", "\u3000",
]


class LlamaCppBpe:
    """A direct transcription of llama.cpp's BPE path: special-token partition, regex split, byte-level BPE."""

    def __init__(self, tokens: list[str], types: list[int], merges: list[str], pre: str) -> None:
        self.tokens = tokens
        self.ids = {text: index for index, text in enumerate(tokens)}
        self.ranks = {(m[: m.find(" ", 1)], m[m.find(" ", 1) + 1 :]): rank for rank, m in enumerate(merges)}
        # control / unknown / user-defined, longest first (llama.cpp cache_special_tokens)
        self.specials = sorted((i for i, t in enumerate(types) if t in (2, 3, 4)), key=lambda i: -len(tokens[i]))
        self.patterns, self.ignore_merges = LLAMA_CPP_PRE[pre]
        self.byte_chars = _byte_chars()

    def encode(self, text: str) -> list[int]:
        fragments: list[str | int] = [text]
        for special in self.specials:
            split: list[str | int] = []
            for fragment in fragments:
                if isinstance(fragment, int):
                    split.append(fragment)
                    continue
                for index, part in enumerate(fragment.split(self.tokens[special])):
                    split.extend(([special] if index else []) + ([part] if part else []))
            fragments = split
        ids: list[int] = []
        for fragment in fragments:
            ids.extend([fragment] if isinstance(fragment, int) else self._encode_text(fragment))
        return ids

    def _encode_text(self, text: str) -> list[int]:
        words = [text]
        for pattern in self.patterns:
            words = [piece for word in words for piece in _split_keeping_gaps(pattern, word)]
        ids: list[int] = []
        for word in words:
            encoded = "".join(self.byte_chars[byte] for byte in word.encode("utf-8"))
            if self.ignore_merges and encoded in self.ids:
                ids.append(self.ids[encoded])
                continue
            for symbol in self._merge(list(encoded)):
                ids.extend([self.ids[symbol]] if symbol in self.ids else [self.ids[char] for char in symbol])
        return ids

    def _merge(self, symbols: list[str]) -> list[str]:
        while len(symbols) > 1:
            ranked = [(self.ranks.get(pair, None), i) for i, pair in enumerate(zip(symbols, symbols[1:]))]
            ranked = [(rank, i) for rank, i in ranked if rank is not None]
            if not ranked:
                break
            _, i = min(ranked)
            symbols = symbols[:i] + [symbols[i] + symbols[i + 1]] + symbols[i + 2 :]
        return symbols


def _split_keeping_gaps(pattern: str, text: str) -> list[str]:
    pieces, position = [], 0
    for match in regex.finditer(pattern, text):
        pieces.extend(piece for piece in (text[position : match.start()], match.group()) if piece)
        position = match.end()
    return pieces + ([text[position:]] if position < len(text) else [])


def _byte_chars() -> list[str]:
    printable = set(range(33, 127)) | set(range(161, 173)) | set(range(174, 256))
    extra = iter(range(256, 512))
    return [chr(byte) if byte in printable else chr(next(extra)) for byte in range(256)]


def random_texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 25))) for _ in range(count)]


@pytest.fixture(scope="module")
def smollm2_reference(smollm2_gguf_reader: gguf.GGUFReader) -> LlamaCppBpe:
    fields = smollm2_gguf_reader.fields
    return LlamaCppBpe(
        fields["tokenizer.ggml.tokens"].contents(),
        fields["tokenizer.ggml.token_type"].contents(),
        fields["tokenizer.ggml.merges"].contents(),
        fields["tokenizer.ggml.pre"].contents(),
    )


def test_smollm2_tokenizer_matches_llama_cpp_reference(
    imported_smollm2: ResolvedModel, smollm2_reference: LlamaCppBpe
) -> None:
    tokenizer = Tokenizer.from_file(str(imported_smollm2.directory / "tokenizer.json"))
    seed = random.randrange(2**32)
    for text in FIXED_TEXTS + random_texts(seed, 150):
        expected = smollm2_reference.encode(text)
        assert tokenizer.encode(text).ids == expected, f"seed={seed} text={text!r}"
        assert tokenizer.decode(expected, skip_special_tokens=False) == text, f"seed={seed} text={text!r}"


def test_smollm2_chatml_tokens_are_single_ids(imported_smollm2: ResolvedModel) -> None:
    tokenizer = Tokenizer.from_file(str(imported_smollm2.directory / "tokenizer.json"))
    ids = tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|endoftext|>").ids
    assert ids[0] == 1 and 2 in ids and ids[-1] == 0
    assert tokenizer.encode("Paris", add_special_tokens=True).ids == tokenizer.encode("Paris").ids


@pytest.mark.parametrize("pre", sorted(LLAMA_CPP_PRE))
def test_tiny_tokenizers_match_reference_for_each_pre_tokenizer(make_tiny_gguf, tmp_path: Path, pre: str) -> None:
    tiny = make_tiny_gguf(pre=pre, add_bos=False)
    import_gguf(tiny.path, tmp_path / "out")
    tokenizer = Tokenizer.from_file(str(tmp_path / "out" / "tokenizer.json"))
    reference = LlamaCppBpe(tiny.tokens, tiny.token_types, tiny.merges, pre)
    seed = random.randrange(2**32)
    for text in FIXED_TEXTS + random_texts(seed, 100) + ["the then inn 1212 <tool_call>the"]:
        assert tokenizer.encode(text).ids == reference.encode(text), f"seed={seed} text={text!r}"


@pytest.mark.parametrize(("pre", "add_bos", "expects_bos"), [("llama-bpe", None, True), ("llama-bpe", False, False),
                                                              ("smollm", None, False), ("smollm", True, True)])
def test_bos_insertion_follows_llama_cpp_defaults(make_tiny_gguf, tmp_path: Path, pre, add_bos, expects_bos) -> None:
    tiny = make_tiny_gguf(pre=pre, add_bos=add_bos)
    import_gguf(tiny.path, tmp_path / "out")
    ids = Tokenizer.from_file(str(tmp_path / "out" / "tokenizer.json")).encode("the").ids
    assert (ids[0] == 1) is expects_bos


def test_chat_templates_default_in_config_named_ones_as_files(make_tiny_gguf, tmp_path: Path) -> None:
    tiny = make_tiny_gguf(tool_use_template="{{ tools | length }} tools")
    import_gguf(tiny.path, tmp_path / "out")
    config = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert config["chat_template"].startswith("{% for message in messages %}")
    tool_use = tmp_path / "out" / "additional_chat_templates" / "tool_use.jinja"
    assert tool_use.read_text() == "{{ tools | length }} tools"
