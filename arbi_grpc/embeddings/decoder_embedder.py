"""Embeddings from a resident decoder (chat) model: the final hidden states (after the final norm) of one causal
forward pass over each input, with no KV cache, pooled as the model's settings say (`embedding_pooling`: the last
token's state by default, the mean over the tokens, or what a sentence-transformers checkpoint declares), run on the
model's engine thread between its steps.

Why a forward of its own rather than a prefill-only request through the scheduler (docs/embeddings.md): it holds no
KV block, so it cannot leak one nor wait for one, and a prefix-cache hit cannot skip the hidden states that mean
pooling needs.

Jobs queue here; the first one queued posts one engine call (`Engine.call`, after the engine's next step when
requests are in it), which takes the jobs queued by the time it runs, interactive first, up to `max_round_tokens`
(default four forward passes' worth; one larger job runs alone); jobs left over post the next call, so rounds and
the chats' steps alternate. A round's rows run sorted by length in forward passes of at most `max_forward_tokens`
tokens, the engine's step budget whose activations its memory budget profiled (a longer input runs alone). A failed
forward fails the jobs of its round only; a refused call (the engine shut down or failed) fails the jobs still
queued.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from arbi_grpc.attention.uncached import Spans, UncachedCausalAttention
from arbi_grpc.embeddings.embedding_model import EmbeddingInput, validated_token_lists
from arbi_grpc.embeddings.pooling import PoolingConfig, PoolingMode, pool_spans
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.request import Priority
from arbi_grpc.errors import ArbiError, EngineStepError, ModelLoadError, UnimplementedError
from arbi_grpc.text.tokenizer import TextTokenizer

DECODER_POOLING_MODES = {"last": PoolingMode.LAST, "mean": PoolingMode.MEAN}
ROUND_FORWARDS = 4  # a round's default token budget, in forward passes: bounds the chats' wait behind one round


def decoder_pooling(setting: str, normalize: bool, model_dir: Path) -> PoolingConfig:
    """The pooling of a decoder model's embeddings: `setting` last or mean (normalized as `normalize` says), or
    auto: the pooling and normalization a sentence-transformers checkpoint declares (modules.json), else last.
    A declared pooling other than last or mean is refused (ModelLoadError)."""
    if setting != "auto":
        return PoolingConfig(DECODER_POOLING_MODES[setting], normalize, None)
    if not (model_dir / "modules.json").is_file():
        return PoolingConfig(PoolingMode.LAST, normalize, None)
    declared = PoolingConfig.from_model_dir(model_dir)
    if declared.mode not in DECODER_POOLING_MODES.values():
        raise ModelLoadError(f"{model_dir}: a decoder model pools last or mean, not the declared "
                             f"{declared.mode.value!r}; serve it with --embedding-pooling last or mean")
    return PoolingConfig(declared.mode, declared.normalize, None)


@dataclass(frozen=True)
class DecoderEmbeddingModel:
    """What EmbeddingService checks and reports of a decoder model's embeddings. Texts are tokenized as a
    completion prompt is, with the tokenizer's BOS when the model asks for one; token ids are used as given."""

    name: str
    tokenizer: TextTokenizer
    vocab_size: int
    max_tokens: int  # the served context, max_model_len
    dimensions: int  # the hidden size
    pooling: PoolingConfig

    def token_lists(self, inputs: Sequence[EmbeddingInput], field: str = "inputs") -> list[list[int]]:
        """The validated token ids of each input; raises InvalidArgumentError naming `field[i]`."""
        return validated_token_lists(
            inputs, field, lambda texts: [self.tokenizer.encode(text, add_special_tokens=True) for text in texts],
            self.vocab_size, self.max_tokens)


@dataclass
class _Job:
    token_lists: list[list[int]]
    result: Future = field(default_factory=Future)

    @property
    def num_tokens(self) -> int:
        return sum(map(len, self.token_lists))


class DecoderEmbedder:
    """Embeds with `engine`'s model; `submit` is safe from any thread."""

    def __init__(self, model: DecoderEmbeddingModel, engine: Engine, max_forward_tokens: int,
                 max_round_tokens: int | None = None) -> None:
        self.model = model
        self._engine = engine
        self.max_forward_tokens = max_forward_tokens
        self.max_round_tokens = max_round_tokens or ROUND_FORWARDS * max_forward_tokens
        self._attention = UncachedCausalAttention()
        self._lock = threading.Lock()
        self._waiting: dict[Priority, deque[_Job]] = {Priority.INTERACTIVE: deque(), Priority.BATCH: deque()}
        self._posted = False  # an engine call is queued that will take the waiting jobs

    def submit(self, token_lists: list[list[int]], priority: Priority = Priority.INTERACTIVE) -> Future:
        """A future of the pooled float32 vectors [len(token_lists), dimensions], in order."""
        if self._engine.runner.ranks is not None:
            raise UnimplementedError(
                f"embeddings of model {self.model.name!r} under tensor parallelism: the worker ranks run only "
                "scheduled steps; serve it with --tensor-parallel-size 1")
        job = _Job(token_lists)
        with self._lock:
            self._waiting[priority].append(job)
            post, self._posted = not self._posted, True
        if post:
            self._post()
        return job.result

    def _post(self) -> None:
        self._engine.call(self._run_round, after_step=True).add_done_callback(self._refused)

    def _refused(self, call: Future) -> None:
        """The engine refused or dropped the call: the jobs still waiting get its reason."""
        error = call.exception()
        if error is None:
            return
        with self._lock:
            jobs = [job for waiting in self._waiting.values() for job in waiting]
            for waiting in self._waiting.values():
                waiting.clear()
            self._posted = False
        for job in jobs:
            job.result.set_exception(error)

    def _run_round(self) -> None:
        """On the engine thread, between two steps."""
        jobs, tokens = [], 0
        with self._lock:
            for waiting in self._waiting.values():  # interactive first
                while waiting and (not jobs or tokens + waiting[0].num_tokens <= self.max_round_tokens):
                    jobs.append(waiting.popleft())
                    tokens += jobs[-1].num_tokens
            repost = self._posted = any(self._waiting.values())
        rows = [ids for job in jobs for ids in job.token_lists]
        try:
            vectors = self._embed_rows(rows)
        except Exception as error:  # noqa: BLE001 (the round's callers get the cause; the engine goes on)
            failure = error if isinstance(error, ArbiError) else EngineStepError(
                f"the embedding forward pass of model {self.model.name!r} failed: {error!r}")
            for job in jobs:
                job.result.set_exception(failure)
        else:
            offset = 0
            for job in jobs:
                job.result.set_result(vectors[offset:offset + len(job.token_lists)])
                offset += len(job.token_lists)
        if repost:
            self._post()

    @torch.inference_mode()
    def _embed_rows(self, rows: list[list[int]]) -> Tensor:
        vectors = torch.empty((len(rows), self.model.dimensions), dtype=torch.float32)
        order = sorted(range(len(rows)), key=lambda r: len(rows[r]))
        chunk: list[int] = []
        for row in order:
            if chunk and sum(len(rows[r]) for r in chunk) + len(rows[row]) > self.max_forward_tokens:
                vectors[chunk] = self._forward([rows[r] for r in chunk])
                chunk = []
            chunk.append(row)
        vectors[chunk] = self._forward([rows[r] for r in chunk])
        return vectors

    def _forward(self, token_lists: list[list[int]]) -> Tensor:
        """One causal pass over whole sequences -> pooled float32 vectors [len(token_lists), dimensions], on the
        host."""
        runner = self._engine.runner
        spans = Spans(tuple(map(len, token_lists)))
        input_ids = torch.tensor([t for ids in token_lists for t in ids], dtype=torch.int64).to(runner.device)
        hidden = runner.model(input_ids, spans.positions(runner.device), spans, None, self._attention)
        return pool_spans(self.model.pooling.mode, hidden, spans).cpu()
