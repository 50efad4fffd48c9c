"""Routing to the resident embedding models: a request for a model that is loading waits for it (bounded,
then UNAVAILABLE with the reason), an unknown name is NOT_FOUND, and an unloaded model is gone. The load
itself is replaced by a slow stand-in returning a tiny random model (this module's unit under test is the
registry, not loading)."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models

from arbi_grpc.embeddings import resident
from arbi_grpc.embeddings.embedding_model import EmbeddingModel
from arbi_grpc.embeddings.pooling import PoolingConfig, PoolingMode
from arbi_grpc.errors import NotFoundError, UnavailableError
from arbi_grpc.models.bert import BertConfig, BertEncoder

CONFIG = BertConfig(vocab_size=32, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16,
                    max_positions=16, type_vocab_size=2, layer_norm_eps=1e-12, pad_token_id=0)


@pytest.fixture
def slow_load(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    release = threading.Event()

    def load(name: str, directory: Path, device: str) -> EmbeddingModel:
        release.wait(10)
        tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
        return EmbeddingModel(name, BertEncoder.random(CONFIG, torch.float32, "cpu"), tokenizer,
                              PoolingConfig(PoolingMode.MEAN, False, None))

    monkeypatch.setattr(resident.EmbeddingModel, "load", staticmethod(load))
    return release


def _model_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "tiny-bert"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["BertModel"], "vocab_size": CONFIG.vocab_size, "hidden_size": CONFIG.hidden_size,
        "num_hidden_layers": CONFIG.num_layers, "num_attention_heads": CONFIG.num_heads,
        "intermediate_size": CONFIG.intermediate_size, "max_position_embeddings": CONFIG.max_positions}))
    return directory


def test_a_request_waits_for_a_loading_model(tmp_path: Path, slow_load: threading.Event) -> None:
    async def scenario() -> None:
        registry = resident.ResidentEmbeddingModels(load_wait_s=5)
        load = asyncio.ensure_future(registry.load(str(_model_dir(tmp_path))))
        await asyncio.sleep(0.05)
        waiting = asyncio.ensure_future(registry.runner("tiny-bert"))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        slow_load.set()
        runner = await waiting
        assert runner.model.name == "tiny-bert" and (await load).name == "tiny-bert"
        assert registry.names == ["tiny-bert"]
        with pytest.raises(NotFoundError, match="no-such"):
            await registry.runner("no-such")
        await registry.unload("tiny-bert")
        with pytest.raises(NotFoundError):
            await registry.runner("")

    asyncio.run(scenario())


def test_a_load_longer_than_the_wait_is_unavailable(tmp_path: Path, slow_load: threading.Event) -> None:
    async def scenario() -> None:
        registry = resident.ResidentEmbeddingModels(load_wait_s=0.1)
        load = asyncio.ensure_future(registry.load(str(_model_dir(tmp_path))))
        await asyncio.sleep(0.05)
        with pytest.raises(UnavailableError, match="still loading"):
            await registry.runner("")
        slow_load.set()
        await load
        await registry.shutdown()

    asyncio.run(scenario())


def test_specs_are_told_apart(tmp_path: Path) -> None:
    assert resident.is_embedding_spec(resident.MINILM_NAME)
    assert resident.is_embedding_spec(str(_model_dir(tmp_path)))
    assert not resident.is_embedding_spec("SmolLM2-135M-Instruct")


def test_each_model_is_a_budget_component_checked_before_its_load(tmp_path: Path, slow_load: threading.Event) -> None:
    from arbi_grpc.embeddings.memory import FLOAT32_BYTES, encoder_parameter_count
    from arbi_grpc.errors import ResourceExhaustedError
    from arbi_grpc.memory.budget import MemoryBudget, MemoryLimit

    checked = []

    def check_fits(name, component) -> None:
        checked.append(name)
        MemoryBudget("cpu", "estimated", (component,), MemoryLimit(limit_bytes, "test"),
                     subject=f"embedding model {name!r}").check_fits()

    async def scenario() -> None:
        registry = resident.ResidentEmbeddingModels(check_fits=check_fits)
        directory = _model_dir(tmp_path)
        with pytest.raises(ResourceExhaustedError, match="embedding model 'tiny-bert'.*embedding tiny-bert"):
            await registry.load(str(directory))
        assert registry.components() == () and registry.names == []  # nothing left registered
        nonlocal limit_bytes
        limit_bytes = 2**40
        slow_load.set()
        await registry.load(str(directory))
        (component,) = registry.components()
        weights = encoder_parameter_count(json.loads((directory / "config.json").read_text())) * FLOAT32_BYTES
        assert weights == sum(t.numel() * 4 for t in registry.models()[0].encoder.weights.values())
        assert component.num_bytes > weights  # plus the activation working set
        await registry.unload("tiny-bert")
        assert registry.components() == ()

    limit_bytes = 1
    asyncio.run(scenario())
    assert checked == ["tiny-bert", "tiny-bert"]
