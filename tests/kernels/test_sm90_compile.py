"""The TKV attention kernels compile for sm_90 (Hopper) on this machine without a GPU (`tests/kernels/sm90_compile.py`),
with the environment's Triton and with 3.6.0, the one the GPU machine's torch 2.11 ships (tests/setup.sh installs it
beside the environment): the interpreter tests beside this one never compile a kernel, and Triton's sm_90 passes
differ between releases (a TKV prefill variant compiled with 3.9 and failed with 3.6)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kernels.sm90_compile import WIDTHS

ROOT = Path(__file__).resolve().parents[2]
GPU_MACHINE_TRITON = Path(sys.prefix) / "triton-3.6.0"


@pytest.mark.parametrize("triton_dir", [None, GPU_MACHINE_TRITON], ids=["installed", "3.6.0"])
def test_tkv_prefill_and_decode_kernels_compile_for_sm90(triton_dir: Path | None) -> None:
    if triton_dir is not None and not (triton_dir / "triton").is_dir():
        pytest.fail(f"Triton 3.6.0 is missing at {triton_dir}: run tests/setup.sh")
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    paths = [str(triton_dir)] if triton_dir is not None else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(ROOT), str(ROOT / "kernels"), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "tests.kernels.sm90_compile"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    compiled = [line.split(":")[0].split(" chunk_exact")[0] for line in done.stdout.splitlines()
                if "compiled for sm_90" in line]
    assert compiled == [f"{kind} K{k}V{v}" for k, v in WIDTHS for kind in ("prefill", "prefill", "decode")], done.stdout
