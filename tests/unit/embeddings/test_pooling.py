"""The pooling an embedding checkpoint declares (modules.json, the Pooling config: mean, CLS or last token;
Normalize, max_seq_length), a decoder model's pooling setting, and the padded mean/CLS/last pooling, the
whole-sequence last/mean pooling and truncation against direct computations on random hidden states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from arbi_grpc.attention.uncached import Spans
from arbi_grpc.embeddings.decoder_embedder import decoder_pooling
from arbi_grpc.embeddings.pooling import PoolingConfig, PoolingMode, cosine_scores, finish_vectors, pool_spans
from arbi_grpc.errors import ModelLoadError


def _sentence_transformers_dir(root: Path, flags: dict[str, bool], normalize: bool) -> Path:
    modules = [{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 8, **flags}))
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    return root


def test_a_checkpoint_declares_mean_pooling_and_normalize(tmp_path: Path) -> None:
    config = PoolingConfig.from_model_dir(_sentence_transformers_dir(
        tmp_path, {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}, normalize=True))
    assert config == PoolingConfig(PoolingMode.MEAN, normalize=True, max_seq_length=128)


def test_cls_pooling_without_normalize(tmp_path: Path) -> None:
    config = PoolingConfig.from_model_dir(_sentence_transformers_dir(
        tmp_path, {"pooling_mode_cls_token": True}, normalize=False))
    assert (config.mode, config.normalize) == (PoolingMode.CLS, False)


def test_an_unsupported_pooling_is_refused_by_name(tmp_path: Path) -> None:
    directory = _sentence_transformers_dir(tmp_path, {"pooling_mode_max_tokens": True}, normalize=False)
    with pytest.raises(ModelLoadError, match="pooling_mode_max_tokens"):
        PoolingConfig.from_model_dir(directory)


def test_a_plain_directory_pools_by_mean_unnormalized(tmp_path: Path) -> None:
    assert PoolingConfig.from_model_dir(tmp_path) == PoolingConfig(PoolingMode.MEAN, False, None)


def test_last_token_pooling_is_declared_too(tmp_path: Path) -> None:
    config = PoolingConfig.from_model_dir(_sentence_transformers_dir(
        tmp_path, {"pooling_mode_lasttoken": True}, normalize=True))
    assert (config.mode, config.normalize) == (PoolingMode.LAST, True)


def test_a_decoder_pools_last_by_default_or_as_its_checkpoint_declares(tmp_path: Path) -> None:
    assert decoder_pooling("auto", True, tmp_path) == PoolingConfig(PoolingMode.LAST, True, None)
    assert decoder_pooling("mean", False, tmp_path) == PoolingConfig(PoolingMode.MEAN, False, None)
    (tmp_path / "st").mkdir()
    (tmp_path / "cls").mkdir()
    declared = _sentence_transformers_dir(tmp_path / "st", {"pooling_mode_mean_tokens": True}, normalize=False)
    assert decoder_pooling("auto", True, declared) == PoolingConfig(PoolingMode.MEAN, False, None)
    assert decoder_pooling("last", True, declared) == PoolingConfig(PoolingMode.LAST, True, None)
    cls = _sentence_transformers_dir(tmp_path / "cls", {"pooling_mode_cls_token": True}, normalize=False)
    with pytest.raises(ModelLoadError, match="pools last or mean, not the declared 'cls'"):
        decoder_pooling("auto", True, cls)


def test_mean_and_cls_pooling_over_real_tokens_only() -> None:
    generator = torch.Generator().manual_seed(3)
    hidden = torch.randn(3, 5, 8, generator=generator)
    lengths = [5, 2, 1]
    mask = torch.tensor([[1] * n + [0] * (5 - n) for n in lengths])
    mean = PoolingConfig(PoolingMode.MEAN, False, None).pool(hidden, mask)
    for row, n in enumerate(lengths):
        torch.testing.assert_close(mean[row], hidden[row, :n].mean(dim=0))
    torch.testing.assert_close(PoolingConfig(PoolingMode.CLS, False, None).pool(hidden, mask), hidden[:, 0])
    last = PoolingConfig(PoolingMode.LAST, False, None).pool(hidden, mask)
    torch.testing.assert_close(last, torch.stack([hidden[row, n - 1] for row, n in enumerate(lengths)]))


def test_truncation_then_normalization_and_cosine() -> None:
    vectors = torch.randn(4, 8, generator=torch.Generator().manual_seed(5))
    finished = finish_vectors(vectors, 3, normalize=True)
    torch.testing.assert_close(finished, vectors[:, :3] / vectors[:, :3].norm(dim=-1, keepdim=True))
    scores = cosine_scores(vectors[0], vectors)
    torch.testing.assert_close(scores, torch.nn.functional.cosine_similarity(vectors[0:1], vectors))


def test_whole_sequence_pooling_takes_the_last_token_or_the_mean() -> None:
    hidden = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    spans = Spans((2, 1, 3))
    torch.testing.assert_close(pool_spans(PoolingMode.LAST, hidden, spans), hidden[[1, 2, 5]])
    expected = torch.stack([hidden[0:2].mean(0), hidden[2], hidden[3:6].mean(0)])
    torch.testing.assert_close(pool_spans(PoolingMode.MEAN, hidden, spans), expected)
    with pytest.raises(NotImplementedError, match="decoder models pool last or mean"):
        pool_spans(PoolingMode.CLS, hidden, spans)
