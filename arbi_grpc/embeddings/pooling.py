"""How an embedding model turns hidden states into one vector: the pooling its checkpoint declares.

sentence-transformers checkpoints declare it in `modules.json` (a Pooling module's directory, holding `config.json`
with one `pooling_mode_*` flag: mean, CLS or last token, and an optional Normalize module) and their context in
`sentence_bert_config.json` (`max_seq_length`). A directory without `modules.json` pools by mean, without
normalization, over the model's full context.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from arbi_grpc.attention.uncached import Spans
from arbi_grpc.errors import ModelLoadError

_POOLING_MODULE = "sentence_transformers.models.Pooling"
_NORMALIZE_MODULE = "sentence_transformers.models.Normalize"


class PoolingMode(Enum):
    MEAN = "mean"
    CLS = "cls"
    LAST = "last"  # the last token's state: a decoder model's default (`embeddings/decoder_embedder.py`)


@dataclass(frozen=True)
class PoolingConfig:
    """The pooling of one embedding model."""

    mode: PoolingMode
    normalize: bool
    max_seq_length: int | None  # the checkpoint's own context bound, below the position table's

    @classmethod
    def from_model_dir(cls, model_dir: Path) -> PoolingConfig:
        modules_file = model_dir / "modules.json"
        if not modules_file.is_file():
            return cls(PoolingMode.MEAN, normalize=False, max_seq_length=None)
        modules = _read_json(modules_file)
        normalize = any(module.get("type") == _NORMALIZE_MODULE for module in modules)
        pooling = [module for module in modules if module.get("type") == _POOLING_MODULE]
        mode = PoolingMode.MEAN
        if pooling:
            flags = _read_json(model_dir / pooling[0].get("path", "") / "config.json")
            chosen = [name for name, on in flags.items() if name.startswith("pooling_mode_") and on]
            modes = {"pooling_mode_mean_tokens": PoolingMode.MEAN, "pooling_mode_cls_token": PoolingMode.CLS,
                     "pooling_mode_lasttoken": PoolingMode.LAST}
            if len(chosen) != 1 or chosen[0] not in modes:
                raise ModelLoadError(f"{model_dir}: pooling {chosen} is not supported (one of {sorted(modes)})")
            mode = modes[chosen[0]]
        bert_config = model_dir / "sentence_bert_config.json"
        max_seq_length = _read_json(bert_config).get("max_seq_length") if bert_config.is_file() else None
        return cls(mode, normalize, int(max_seq_length) if max_seq_length else None)

    def pool(self, hidden: Tensor, attention_mask: Tensor) -> Tensor:
        """One float32 vector per row of `hidden` [batch, seq, dim], over its real tokens."""
        hidden = hidden.float()
        if self.mode is PoolingMode.CLS:
            return hidden[:, 0]
        if self.mode is PoolingMode.LAST:
            return hidden[torch.arange(hidden.shape[0], device=hidden.device), attention_mask.sum(dim=1) - 1]
        mask = attention_mask.to(hidden.dtype).unsqueeze(-1)
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def pool_spans(mode: PoolingMode, hidden: Tensor, spans: Spans) -> Tensor:
    """One float32 vector per sequence of a flattened batch `hidden` [T, dim] laid out by `spans`: its last
    token's state, or the mean over its tokens."""
    if mode is PoolingMode.LAST:
        return hidden.index_select(0, spans.last_rows(hidden.device)).float()
    if mode is PoolingMode.MEAN:
        sequence_of_row = torch.repeat_interleave(
            torch.arange(len(spans.lengths), device=hidden.device),
            torch.tensor(spans.lengths, device=hidden.device))
        sums = torch.zeros((len(spans.lengths), hidden.shape[1]), dtype=torch.float32, device=hidden.device)
        sums.index_add_(0, sequence_of_row, hidden.float())
        return sums / torch.tensor(spans.lengths, dtype=torch.float32, device=hidden.device)[:, None]
    raise NotImplementedError(f"pooling {mode.value!r} over whole sequences: decoder models pool last or mean")


def finish_vectors(vectors: Tensor, dimensions: int | None, normalize: bool) -> Tensor:
    """Truncates to the first `dimensions` values, then L2-normalizes when asked."""
    if dimensions is not None:
        vectors = vectors[:, :dimensions]
    return F.normalize(vectors, dim=-1) if normalize else vectors


def cosine_scores(query: Tensor, documents: Tensor) -> Tensor:
    """Cosine similarity of one query vector with each document vector."""
    return F.normalize(documents, dim=-1) @ F.normalize(query, dim=-1)


def _read_json(path: Path) -> dict | list:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"{path}: {error}") from error


__all__ = ["PoolingConfig", "PoolingMode", "cosine_scores", "finish_vectors", "pool_spans"]
