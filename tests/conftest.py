"""Fixtures shared by every test tier: the real SmolLM2 model imported once per session into a
temporary model cache, and an in-process engine behind a real gRPC server on 127.0.0.1."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

# Triton reads this when a kernel is defined, so it must be set before arbi_kernels is first imported:
# without CUDA the kernels run in Triton's interpreter.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def model_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private model cache for the session (ARBI_CACHE_DIR), so tests never touch the user's."""
    path = tmp_path_factory.mktemp("arbi-cache")
    os.environ["ARBI_CACHE_DIR"] = str(path)
    return path


@pytest.fixture(scope="session")
def smollm2_cache_root(model_cache_dir: Path) -> Path:
    """The session's model cache root (`$ARBI_CACHE_DIR/models`)."""
    return model_cache_dir / "models"


@pytest.fixture(scope="session")
def imported_smollm2(smollm2_cache_root: Path):
    """The embedded SmolLM2-135M-Instruct, imported from its GGUF once per session."""
    from arbi_grpc.models.model_cache import DEFAULT_MODEL, resolve_model

    return resolve_model(DEFAULT_MODEL, cache_root=smollm2_cache_root)


@pytest.fixture(scope="session")
def smollm2_dir(imported_smollm2) -> Path:
    """The directory of the imported SmolLM2 (HF layout)."""
    return imported_smollm2.directory


def wait_for_idle_pool(engine, timeout_s: float = 10.0) -> None:
    """Waits until the engine holds no request and every KV block is free; fails otherwise."""
    deadline = time.monotonic() + timeout_s
    stats = engine.stats()
    while time.monotonic() < deadline:
        stats = engine.stats()
        if stats.num_running == stats.num_waiting == 0 and stats.num_free_blocks == stats.num_total_blocks:
            return
        time.sleep(0.02)
    pytest.fail(f"KV pool not back to fully free: {stats}")


@pytest.fixture(scope="session")
def served_smollm2(smollm2_dir: Path) -> Iterator:
    """SmolLM2 behind a real gRPC server on 127.0.0.1 (in this process, so tests can read engine stats)."""
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.served_model import build_served_model
    from arbi_grpc.server import GrpcServer

    config = EngineConfig(model=str(smollm2_dir), kv_cache_memory_mib=256, max_waiting_requests=64)
    server = GrpcServer(build_served_model(config)).start()
    yield server
    server.stop()
