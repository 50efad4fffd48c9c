"""DecoderEmbedder's rounds on a stand-in engine whose calls run when the test says: requests queued before a call
runs share its round (interactive first, up to the round budget; the rest post the next call), rows run in
forward passes within the token budget and come back in order, a failed forward fails its round only, and a
refused call fails the requests waiting with the engine's reason. The stand-in model's hidden state of a token is
its id and position, so the pooled vectors say which tokens each row saw."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest
import torch

from arbi_grpc.embeddings.decoder_embedder import DecoderEmbedder, DecoderEmbeddingModel
from arbi_grpc.embeddings.pooling import PoolingConfig, PoolingMode
from arbi_grpc.engine.request import Priority
from arbi_grpc.errors import EngineStepError, UnavailableError, UnimplementedError


class _Engine:
    """Queues `call`s until `run_calls`; `refuse` makes the next calls fail as a closed engine's do."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, Future]] = []
        self.forwards: list[tuple[int, ...]] = []  # each forward pass's row lengths
        self.refusal: Exception | None = None
        self.fail_next_forward = False
        self.runner = SimpleNamespace(ranks=None, device=torch.device("cpu"), model=self._model)

    def call(self, function, after_step: bool = False) -> Future:
        assert after_step  # rounds leave the chats' steps between them
        future: Future = Future()
        if self.refusal is not None:
            future.set_exception(self.refusal)
        else:
            self.calls.append((function, future))
        return future

    def run_calls(self) -> None:
        while self.calls:
            function, future = self.calls.pop(0)
            future.set_result(function())

    def _model(self, input_ids, positions, spans, kv_cache, attention):
        self.forwards.append(spans.lengths)
        if self.fail_next_forward:
            self.fail_next_forward = False
            raise RuntimeError("device lost")
        return torch.stack([input_ids.float(), positions.float()], dim=1)  # [T, 2]


def _embedder(engine: _Engine, mode: PoolingMode = PoolingMode.LAST, **budgets) -> DecoderEmbedder:
    model = DecoderEmbeddingModel("chat", tokenizer=None, vocab_size=100, max_tokens=64, dimensions=2,
                                  pooling=PoolingConfig(mode, True, None))
    return DecoderEmbedder(model, engine, **{"max_forward_tokens": 8, **budgets})


def test_requests_queued_before_a_call_runs_share_its_round_in_order() -> None:
    engine = _Engine()
    embedder = _embedder(engine)
    first = embedder.submit([[5, 6, 7], [9]])
    second = embedder.submit([[1, 2, 3, 4, 5, 6]])
    assert len(engine.calls) == 1  # the second request joined the posted call
    engine.run_calls()
    assert first.result().tolist() == [[7.0, 2.0], [9.0, 0.0]]  # each row's last token (id, position)
    assert second.result().tolist() == [[6.0, 5.0]]
    assert engine.forwards == [(1, 3), (6,)]  # sorted by length, at most 8 tokens a pass
    mean = _embedder(engine, PoolingMode.MEAN).submit([[2, 4]])
    engine.run_calls()
    assert mean.result().tolist() == [[3.0, 0.5]]


def test_interactive_requests_go_first_and_the_rest_post_the_next_call() -> None:
    engine = _Engine()
    embedder = _embedder(engine, max_round_tokens=4)
    batch = embedder.submit([[1, 1, 1]], Priority.BATCH)
    interactive = embedder.submit([[2, 2, 2]])
    function, _ = engine.calls.pop(0)
    function()  # the first round: the interactive request only (the budget holds one)
    assert interactive.done() and not batch.done() and len(engine.calls) == 1
    engine.run_calls()
    assert batch.result().tolist() == [[1.0, 2.0]]


def test_a_failed_forward_fails_its_round_only() -> None:
    engine = _Engine()
    embedder = _embedder(engine)
    engine.fail_next_forward = True
    failed = embedder.submit([[1, 2]])
    engine.run_calls()
    with pytest.raises(EngineStepError, match="the embedding forward pass of model 'chat' failed: RuntimeError"):
        failed.result()
    later = embedder.submit([[3]])
    engine.run_calls()
    assert later.result().tolist() == [[3.0, 0.0]]


def test_a_refused_call_fails_the_waiting_requests_with_the_engines_reason() -> None:
    engine = _Engine()
    embedder = _embedder(engine)
    engine.refusal = UnavailableError("the model's engine is shutting down")
    with pytest.raises(UnavailableError, match="shutting down"):
        embedder.submit([[1]]).result()
    engine.refusal = None
    answered = embedder.submit([[4]])  # a new call is posted: nothing was left marked as posted
    engine.run_calls()
    assert answered.result().tolist() == [[4.0, 0.0]]


def test_tensor_parallel_models_do_not_embed_yet() -> None:
    engine = _Engine()
    engine.runner.ranks = object()
    with pytest.raises(UnimplementedError, match="--tensor-parallel-size 1"):
        _embedder(engine).submit([[1]])
