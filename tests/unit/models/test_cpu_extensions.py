"""The C++ CPU kernels are built into the cache on first use and loaded from it after (one file per source,
torch, compiler and flags); without a compiler the
build fails naming it, and the decoder falls back to torch's ops with a warning (in fresh processes: the
loaded libraries are cached per process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[3]


def _run(code: str, cache: Path, compiler: str | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "ARBI_CACHE_DIR": str(cache)}
    if compiler is not None:
        environment["CXX"] = compiler
    return subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, env=environment, capture_output=True,
                          text=True, timeout=600)


def test_a_library_is_built_once_then_loaded_from_the_cache(tmp_path: Path) -> None:
    code = ("from arbi_grpc.cpu_extensions import load_cpu_extension\n"
            "import torch\n"
            "from arbi_grpc.models.cpu_decoder_ops import KERNELS_SOURCE\n"
            "ops = load_cpu_extension(KERNELS_SOURCE)\n"
            "print(ops.silu_and_mul(torch.zeros(1, 4)).shape)")
    built = _run(code, tmp_path)
    assert built.returncode == 0, built.stderr
    assert built.stdout.strip() == "torch.Size([1, 2])"
    libraries = list((tmp_path / "kernels").glob("decoder_ops-*.so"))
    assert len(libraries) == 1
    built_at = libraries[0].stat().st_mtime_ns
    loaded = _run(code, tmp_path)
    assert loaded.returncode == 0, loaded.stderr
    assert list((tmp_path / "kernels").glob("decoder_ops-*.so")) == libraries
    assert libraries[0].stat().st_mtime_ns == built_at


@pytest.mark.parametrize("source", ["arbi_grpc/models/csrc/decoder_ops.cpp", "arbi_grpc/models/csrc/block_linear.cpp",
                                    "arbi_grpc/attention/csrc/paged_decode.cpp"])
def test_without_a_compiler_the_build_fails_naming_it(tmp_path: Path, source: str) -> None:
    missing = str(tmp_path / "no-such-compiler")
    failed = _run(f"from pathlib import Path\nfrom arbi_grpc.cpu_extensions import load_cpu_extension\n"
                  f"load_cpu_extension(Path({source!r}))", tmp_path, compiler=missing)
    assert failed.returncode != 0
    assert "RuntimeError" in failed.stderr and "need a C++ compiler" in failed.stderr and missing in failed.stderr


def test_without_a_compiler_the_decoder_runs_torch_ops_and_warns(tmp_path: Path) -> None:
    fallback = _run("import torch\n"
                    "from arbi_grpc.models.decoder_ops import decoder_ops_for\n"
                    "ops = decoder_ops_for(torch.device('cpu'), torch.ones(4), 64)\n"
                    "print(type(ops).__name__)", tmp_path, compiler=str(tmp_path / "no-such-compiler"))
    assert fallback.returncode == 0, fallback.stderr
    assert fallback.stdout.strip() == "TorchDecoderOps"
    assert "CPU decoder kernels unavailable, using torch's ops" in fallback.stderr
