"""GGUF tokenizer metadata as Hugging Face tokenizer files that tokenize exactly as llama.cpp does.

Covers `tokenizer.ggml.model == "gpt2"` (byte-level BPE) with the pre-tokenizers llama.cpp names in
`tokenizer.ggml.pre`; builds `tokenizer.json` (via the `tokenizers` library), `tokenizer_config.json` (with the
default chat template; named variants are returned for HF's `additional_chat_templates/`) and the token ids of
`generation_config.json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from arbi_grpc.errors import ModelLoadError
from arbi_grpc.models.gguf.config import SpecialTokenIds
from arbi_grpc.models.gguf.file import GgufMetadata

# llama.cpp's tokenizer.ggml.token_type values.
TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_UNKNOWN = 2
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

# Regexes exactly as llama.cpp's llm_tokenizer_bpe applies them (its adapted, ASCII-case-only contractions).
_GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3_PATTERN = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_PATTERN = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class PreTokenizerSpec:
    """How llama.cpp pre-splits text for a family of `tokenizer.ggml.pre` names."""

    names: tuple[str, ...]
    # Applied in order; each splits every piece further, keeping matches and the text between them.
    split_patterns: tuple[str, ...]
    # Whole pre-token emitted directly when it is in the vocabulary (llama3's `ignore_merges`).
    ignore_merges: bool
    # llama.cpp's add_bos default when `tokenizer.ggml.add_bos_token` is absent.
    add_bos_default: bool


PRE_TOKENIZERS: tuple[PreTokenizerSpec, ...] = (
    PreTokenizerSpec(("gpt-2", "phi-2", "mpt", "olmo"), (_GPT2_PATTERN,), False, False),
    PreTokenizerSpec(
        ("smollm", "starcoder", "refact", "codeshell", "command-r"), (r"\p{N}", _GPT2_PATTERN), False, False
    ),
    PreTokenizerSpec(("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"), (_LLAMA3_PATTERN,), True, True),
    PreTokenizerSpec(("dbrx", "smaug-bpe"), (_LLAMA3_PATTERN,), False, False),
    PreTokenizerSpec(("qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"), (_QWEN2_PATTERN,), False, False),
)


def pre_tokenizer_spec(name: str) -> PreTokenizerSpec:
    for spec in PRE_TOKENIZERS:
        if name in spec.names:
            return spec
    supported = ", ".join(name for spec in PRE_TOKENIZERS for name in spec.names)
    raise NotImplementedError(f"GGUF pre-tokenizer {name!r} is not supported (supported: {supported})")


@dataclass(frozen=True)
class GgufVocabulary:
    """The tokenizer as the GGUF stores it, validated."""

    tokens: tuple[str, ...]
    token_types: tuple[int, ...]
    merges: tuple[tuple[str, str], ...]
    pre_tokenizer: PreTokenizerSpec
    bos: int | None
    eos: int | None
    unk: int | None
    pad: int | None
    end_of_generation: tuple[int, ...]
    add_bos: bool
    add_eos: bool

    def text(self, token_id: int | None) -> str | None:
        return None if token_id is None else self.tokens[token_id]

    def special_ids(self) -> SpecialTokenIds:
        return SpecialTokenIds(bos=self.bos, eos=self.eos, pad=self.pad)


def read_vocabulary(metadata: GgufMetadata) -> GgufVocabulary:
    """Tokens, types, merges and special ids from `tokenizer.ggml.*`, checked the way llama.cpp checks them."""
    path = metadata.path
    model = metadata.string("tokenizer.ggml.model")
    if model != "gpt2":
        raise NotImplementedError(f"GGUF tokenizer model {model!r} is not supported (only 'gpt2', byte-level BPE)")
    pre = pre_tokenizer_spec(metadata.string("tokenizer.ggml.pre", default="default"))
    # llama.cpp renames empty tokens so every id keeps a unique text.
    stored_tokens = metadata.string_list("tokenizer.ggml.tokens")
    tokens = tuple(text or f"[EMPTY_{index}]" for index, text in enumerate(stored_tokens))
    if len(set(tokens)) != len(tokens):
        raise ModelLoadError(f"{path}: tokenizer.ggml.tokens has duplicate entries")
    # Without token types llama.cpp treats every token as normal (nothing is split out as special).
    token_types = (
        tuple(metadata.integer_list("tokenizer.ggml.token_type"))
        if metadata.has("tokenizer.ggml.token_type")
        else (TOKEN_TYPE_NORMAL,) * len(tokens)
    )
    if len(token_types) < len(tokens):
        raise ModelLoadError(f"{path}: {len(token_types)} token types for {len(tokens)} tokens")
    merges = tuple(_split_merge(path, merge) for merge in metadata.string_list("tokenizer.ggml.merges"))
    # The tokenizers library panics (not raises) on merges outside the vocabulary, so check them here.
    known = set(tokens)
    for left, right in merges:
        if not {left, right, left + right} <= known:
            raise ModelLoadError(f"{path}: tokenizer merge {left + ' ' + right!r} uses tokens outside the vocabulary")

    def token_id(key: str) -> int | None:
        value = metadata.optional_integer(f"tokenizer.ggml.{key}")
        if value is not None and not 0 <= value < len(tokens):
            raise ModelLoadError(
                f"{path}: tokenizer.ggml.{key} = {value} is outside the {len(tokens)}-token vocabulary"
            )
        return value

    bos, eos = token_id("bos_token_id"), token_id("eos_token_id")
    end_ids = [eos, token_id("eot_token_id"), token_id("eom_token_id")]
    vocabulary = GgufVocabulary(
        tokens=tokens,
        token_types=token_types[: len(tokens)],
        merges=merges,
        pre_tokenizer=pre,
        bos=bos,
        eos=eos,
        unk=token_id("unknown_token_id"),
        pad=token_id("padding_token_id"),
        end_of_generation=tuple(dict.fromkeys(i for i in end_ids if i is not None)),
        add_bos=metadata.boolean("tokenizer.ggml.add_bos_token", default=pre.add_bos_default),
        add_eos=metadata.boolean("tokenizer.ggml.add_eos_token", default=False),
    )
    for flag, token, name in ((vocabulary.add_bos, bos, "bos"), (vocabulary.add_eos, eos, "eos")):
        if flag and token is None:
            raise ModelLoadError(f"{path}: tokenizer.ggml.add_{name}_token is true but no {name} token id is set")
    return vocabulary


def _split_merge(path: Path, merge: str) -> tuple[str, str]:
    # Like llama.cpp: split at the first space after the first character (a merge part may itself be " ").
    position = merge.find(" ", 1)
    if position < 0:
        raise ModelLoadError(f"{path}: tokenizer merge {merge!r} has no separating space")
    return merge[:position], merge[position + 1 :]


def build_tokenizer(vocabulary: GgufVocabulary) -> Tokenizer:
    """A `tokenizers` byte-level BPE tokenizer equivalent to llama.cpp's for this vocabulary."""
    bpe = models.BPE(
        vocab={text: index for index, text in enumerate(vocabulary.tokens)},
        merges=list(vocabulary.merges),
        ignore_merges=vocabulary.pre_tokenizer.ignore_merges,
        fuse_unk=False,
        byte_fallback=False,
    )
    tokenizer = Tokenizer(bpe)
    splits = [
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)
        for pattern in vocabulary.pre_tokenizer.split_patterns
    ]
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    # llama.cpp splits control, unknown and user-defined tokens out of the text before BPE (parse_special).
    typed = list(zip(vocabulary.tokens, vocabulary.token_types))
    special = [text for text, kind in typed if kind in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_UNKNOWN)]
    user_defined = [text for text, kind in typed if kind == TOKEN_TYPE_USER_DEFINED]
    tokenizer.add_special_tokens([AddedToken(text, normalized=False, special=True) for text in special])
    tokenizer.add_tokens([AddedToken(text, normalized=False, special=False) for text in user_defined])
    if vocabulary.add_bos or vocabulary.add_eos:
        tokenizer.post_processor = _bos_eos_template(vocabulary)
    return tokenizer


def _bos_eos_template(vocabulary: GgufVocabulary) -> processors.TemplateProcessing:
    prefix = [(vocabulary.text(vocabulary.bos), vocabulary.bos)] if vocabulary.add_bos else []
    suffix = [(vocabulary.text(vocabulary.eos), vocabulary.eos)] if vocabulary.add_eos else []
    before, after = [text for text, _ in prefix], [text for text, _ in suffix]
    single = [*before, "$A:0", *after]
    return processors.TemplateProcessing(
        single=single, pair=[*single, *before, "$B:1", *after], special_tokens=list(dict(prefix + suffix).items())
    )


def named_chat_templates(metadata: GgufMetadata) -> dict[str, str]:
    """The GGUF's extra templates (`tokenizer.chat_template.<name>`, e.g. tool_use), keyed by name."""
    prefix = "tokenizer.chat_template."
    return {key[len(prefix) :]: metadata.string(key) for key in metadata.keys_with_prefix(prefix)}


def tokenizer_config(vocabulary: GgufVocabulary, metadata: GgufMetadata, model_max_length: int) -> dict[str, Any]:
    """`tokenizer_config.json`; BOS/EOS insertion itself lives in tokenizer.json's post-processor."""
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": vocabulary.text(vocabulary.bos),
        "eos_token": vocabulary.text(vocabulary.eos),
        "unk_token": vocabulary.text(vocabulary.unk),
        "pad_token": vocabulary.text(vocabulary.pad),
        "add_bos_token": vocabulary.add_bos,
        "add_eos_token": vocabulary.add_eos,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
    }
    if metadata.has("tokenizer.chat_template"):
        config["chat_template"] = metadata.string("tokenizer.chat_template")
    return config


def generation_config(vocabulary: GgufVocabulary) -> dict[str, Any]:
    """`generation_config.json`: eos_token_id is a list when the GGUF names extra end-of-turn tokens."""
    end = vocabulary.end_of_generation
    return {
        "bos_token_id": vocabulary.bos,
        "eos_token_id": end[0] if len(end) == 1 else list(end) or None,
        "pad_token_id": vocabulary.pad,
    }
