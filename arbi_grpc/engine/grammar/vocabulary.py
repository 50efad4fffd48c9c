"""The model's vocabulary as xgrammar sees it: a `TokenizerInfo` built from our own tokenizer (the `tokenizers`
library's entries; no transformers tokenizer), and a fingerprint that keys the compile cache.

Rules: the encoded vocabulary is the raw entry of every id (holes are empty); the vocab type follows
tokenizer.json's decoder (ByteLevel: byte-level BPE as in SmolLM2, Llama 3, Qwen; ByteFallback: SentencePiece
BPE; else raw), and a SentencePiece decoder that strips the leading space (Metaspace, Strip) means the
tokenizer adds a prefix space. `vocab_size` is the width of the model's logits, which may exceed the
tokenizer's (padding rows are never allowed; tokenizer ids past it are left out, as they can never be sampled);
the stop tokens are the model's EOS ids.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

import xgrammar as xgr

from arbi_grpc.text.tokenizer import TextTokenizer


@dataclass(frozen=True)
class GrammarVocabulary:
    """A served model's `TokenizerInfo` and the fingerprint of everything it was built from."""

    info: xgr.TokenizerInfo
    fingerprint: str  # hex sha256 of the vocabulary, its type, width and stop ids, and xgrammar's format
    vocab_size: int  # the logits width
    stop_token_ids: tuple[int, ...]


def vocab_type_of(decoder_types: Iterable[str]) -> tuple[xgr.VocabType, bool]:
    """(vocab type, add_prefix_space) from the types of tokenizer.json's decoder steps."""
    types = set(decoder_types)
    if "ByteLevel" in types:
        return xgr.VocabType.BYTE_LEVEL, False
    prefix_space = bool(types & {"Metaspace", "Strip"})
    if "ByteFallback" in types:
        return xgr.VocabType.BYTE_FALLBACK, prefix_space
    return xgr.VocabType.RAW, prefix_space


def build_vocabulary(tokenizer: TextTokenizer, vocab_size: int, stop_token_ids: Iterable[int]) -> GrammarVocabulary:
    """The TokenizerInfo of a model whose logits are `vocab_size` wide and which stops on `stop_token_ids`."""
    entries = tokenizer.vocabulary()
    encoded = [""] * min(max(entries.values()) + 1, vocab_size)
    for entry, token_id in entries.items():
        if token_id < vocab_size:  # an id past the logits can never be sampled
            encoded[token_id] = entry
    vocab_type, add_prefix_space = vocab_type_of(tokenizer.decoder_types())
    stops = tuple(sorted(set(stop_token_ids)))
    info = xgr.TokenizerInfo(encoded, vocab_type, vocab_size=vocab_size, stop_token_ids=list(stops),
                             add_prefix_space=add_prefix_space)
    digest = hashlib.sha256()
    digest.update(json.dumps([vocab_type.name, add_prefix_space, vocab_size, stops,
                              xgr.get_serialization_version()]).encode())
    for entry in encoded:
        digest.update(entry.encode("utf-8", "surrogatepass") + b"\0")
    return GrammarVocabulary(info, digest.hexdigest(), vocab_size, stops)
