"""The batching encoder runner on a small random BERT: requests submitted together come back each with its
own rows, equal to running each alone; padding never changes a row; a failing round fails only its requests;
queued interactive requests run before queued batch-priority ones."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest
import torch
from tokenizers import Tokenizer, models

from arbi_grpc.embeddings.embedding_model import EmbeddingModel
from arbi_grpc.embeddings.encoder_runner import EncoderRunner
from arbi_grpc.embeddings.pooling import PoolingConfig, PoolingMode
from arbi_grpc.engine.request import Priority
from arbi_grpc.models.bert import BertConfig, BertEncoder

CONFIG = BertConfig(vocab_size=64, hidden_size=16, num_layers=2, num_heads=4, intermediate_size=32,
                    max_positions=32, type_vocab_size=2, layer_norm_eps=1e-12, pad_token_id=0)


@pytest.fixture(scope="module")
def model() -> EmbeddingModel:
    encoder = BertEncoder.random(CONFIG, torch.float32, "cpu", seed=7)
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    return EmbeddingModel("tiny", encoder, tokenizer, PoolingConfig(PoolingMode.MEAN, False, None))


def _lists(seed: int, count: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, CONFIG.max_positions, (count,), generator=generator)
    return [torch.randint(1, CONFIG.vocab_size, (int(n),), generator=generator).tolist() for n in lengths]


def test_padding_does_not_change_a_row(model: EmbeddingModel) -> None:
    lists = _lists(1, 6)
    together = model.embed_batch(lists)
    for row, ids in enumerate(lists):
        torch.testing.assert_close(together[row], model.embed_batch([ids])[0], atol=1e-5, rtol=1e-5)


def test_concurrent_requests_each_get_their_own_rows(model: EmbeddingModel) -> None:
    runner = EncoderRunner(model, max_batch_tokens=200)
    try:
        requests = [_lists(seed, 1 + seed % 5) for seed in range(12)]
        futures = [runner.submit(lists) for lists in requests]
        for lists, future in zip(requests, futures):
            torch.testing.assert_close(future.result(timeout=30), model.embed_batch(lists), atol=1e-5, rtol=1e-5)
    finally:
        runner.close()


def test_a_failing_round_fails_its_requests_and_the_runner_goes_on(model: EmbeddingModel) -> None:
    runner = EncoderRunner(model)
    try:
        failed: Future = runner.submit([[CONFIG.vocab_size + 5]])  # outside the table: the forward raises
        with pytest.raises(IndexError):
            failed.result(timeout=30)
        ids = _lists(2, 1)
        torch.testing.assert_close(runner.submit(ids).result(timeout=30), model.embed_batch(ids))
    finally:
        runner.close()
    assert not any(t.name == "arbi-encoder-tiny" for t in threading.enumerate())


def test_queued_interactive_requests_run_before_batch_ones(model: EmbeddingModel) -> None:
    blocking = EmbeddingModel("blocking", model.encoder, model.tokenizer, model.pooling)
    release, order = threading.Event(), []

    def embed_batch(token_lists):
        release.wait(timeout=30)  # holds the first round until everything else is queued
        order.append(token_lists[0][0])
        return model.embed_batch(token_lists)

    blocking.embed_batch = embed_batch
    runner = EncoderRunner(blocking, max_batch_tokens=1)  # one request per round
    try:
        first = runner.submit([[1]])
        batch = [runner.submit([[10 + index]], Priority.BATCH) for index in range(2)]
        interactive = [runner.submit([[20 + index]]) for index in range(2)]
        release.set()
        for future in (first, *batch, *interactive):
            future.result(timeout=30)
        assert order == [1, 20, 21, 10, 11]
    finally:
        runner.close()
