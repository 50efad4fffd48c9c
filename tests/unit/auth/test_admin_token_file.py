"""The minted admin token file: servers that boot together on one cache (the replicas of a test, pods on a
shared volume) all load the one token that was minted, never an empty or partial file."""

from __future__ import annotations

import multiprocessing
import stat
from pathlib import Path

from arbi_grpc.auth.credentials import load_credentials
from arbi_grpc.server_config import ADMIN_TOKEN_FILE_NAME, ServerConfig

BOOTS = 4
ROUNDS = 40  # before the file was linked into place whole, about 4 rounds in 10 had a boot read it empty


def _boot(cache_dir: Path, barrier, results) -> None:
    barrier.wait()
    try:
        results.put(load_credentials(ServerConfig(), cache_dir).admin_token)
    except Exception as error:  # the parent asserts on what each boot got
        results.put(f"{type(error).__name__}: {error}")


def test_concurrent_first_boots_load_one_whole_token(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    for round_index in range(ROUNDS):
        cache_dir = tmp_path / str(round_index)
        barrier, results = context.Barrier(BOOTS), context.Queue()
        boots = [context.Process(target=_boot, args=(cache_dir, barrier, results)) for _ in range(BOOTS)]
        for boot in boots:
            boot.start()
        tokens = {results.get(timeout=30) for _ in boots}
        for boot in boots:
            boot.join(timeout=30)
        token_file = cache_dir / ADMIN_TOKEN_FILE_NAME
        assert tokens == {token_file.read_text().strip()}, tokens
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert [path.name for path in cache_dir.iterdir()] == [ADMIN_TOKEN_FILE_NAME]  # no draft left behind
