"""A resident embedding model: a BERT encoder, its tokenizer and pooling, and the checks on its inputs.

`embed_batch` runs one padded forward pass over already validated token lists; the batching across
requests is the runner's (`embeddings/encoder_runner.py`). The tokenizer adds the checkpoint's special
tokens ([CLS] ... [SEP]) to texts; token-id inputs are used as given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import Tensor

from arbi_grpc.embeddings.pooling import PoolingConfig
from arbi_grpc.errors import InvalidArgumentError, ModelLoadError
from arbi_grpc.models.bert import BertEncoder


@dataclass(frozen=True)
class EmbeddingInput:
    """One input: a text or token ids (exactly one is set)."""

    text: str | None = None
    token_ids: tuple[int, ...] | None = None


class EmbeddingModel:
    """One embedding model, immutable after loading."""

    def __init__(self, name: str, encoder: BertEncoder, tokenizer: Tokenizer, pooling: PoolingConfig) -> None:
        self.name = name
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.pooling = pooling
        positions = encoder.config.max_positions
        self.max_tokens = min(positions, pooling.max_seq_length or positions)
        self.dimensions = encoder.config.hidden_size
        self.vocab_size = encoder.config.vocab_size

    @classmethod
    def load(cls, name: str, model_dir: Path, device: str = "cpu") -> EmbeddingModel:
        tokenizer_file = model_dir / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise ModelLoadError(f"{model_dir}: no tokenizer.json")
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        return cls(name, BertEncoder.load(model_dir, device=device), tokenizer, PoolingConfig.from_model_dir(model_dir))

    @property
    def weight_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.encoder.weights.values())

    def token_lists(self, inputs: Sequence[EmbeddingInput], field: str = "inputs") -> list[list[int]]:
        """The validated token ids of each input; raises InvalidArgumentError naming `field[i]`."""
        return validated_token_lists(inputs, field, lambda texts: [e.ids for e in self.tokenizer.encode_batch(texts)],
                                     self.vocab_size, self.max_tokens)

    def embed_batch(self, token_lists: Sequence[Sequence[int]]) -> Tensor:
        """Pooled float32 vectors [len(token_lists), dimensions] (not yet truncated or normalized)."""
        longest = max(len(ids) for ids in token_lists)
        pad = self.encoder.config.pad_token_id
        ids = torch.full((len(token_lists), longest), pad, dtype=torch.long)
        mask = torch.zeros((len(token_lists), longest), dtype=torch.long)
        for row, tokens in enumerate(token_lists):
            ids[row, :len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            mask[row, :len(tokens)] = 1
        ids, mask = ids.to(self.encoder.device), mask.to(self.encoder.device)
        return self.pooling.pool(self.encoder.forward(ids, mask), mask).cpu()


def validated_token_lists(inputs: Sequence[EmbeddingInput], field: str,
                          encode: Callable[[list[str]], list[list[int]]], vocab_size: int,
                          max_tokens: int) -> list[list[int]]:
    """The token ids of each input (texts through `encode`, token ids as given), checked: at least one input, no
    empty text or id list, ids in [0, vocab_size), at most `max_tokens` each; else InvalidArgumentError naming
    `field` or `field[i]`."""
    if not inputs:
        raise InvalidArgumentError(field, "must hold at least one input")
    texts = [(index, item.text) for index, item in enumerate(inputs) if item.text]
    encoded = dict(zip((index for index, _ in texts), encode([text for _, text in texts]) if texts else []))
    lists: list[list[int]] = []
    for index, item in enumerate(inputs):
        name = f"{field}[{index}]"
        if item.text is not None:
            if not item.text:
                raise InvalidArgumentError(name, "must not be an empty string")
            ids = list(encoded[index])
        elif item.token_ids:
            ids = list(item.token_ids)
            bad = next((t for t in ids if not 0 <= t < vocab_size), None)
            if bad is not None:
                raise InvalidArgumentError(name, f"token id {bad} is outside the vocabulary [0, {vocab_size})")
        else:
            raise InvalidArgumentError(name, "must be a non-empty text or token id list")
        if not ids:
            raise InvalidArgumentError(name, "encodes to no token")
        if len(ids) > max_tokens:
            raise InvalidArgumentError(name, f"has {len(ids)} tokens, more than the model's context of {max_tokens}")
        lists.append(ids)
    return lists
