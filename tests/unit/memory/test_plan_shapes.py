"""`plan --shape` needs no file, and gives the same budget as `plan --model DIR` of a directory that holds
only that shape's config.json (no weights)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from arbi_grpc.cli import main
from arbi_grpc.models.reference_shapes import REFERENCE_SHAPES, write_shape_directory

PLAN_FLAGS = ["plan", "--json", "--device", "cuda", "--max-context", "4096", "--memory-limit-mib", "140000"]


@pytest.mark.parametrize("shape", sorted(REFERENCE_SHAPES))
def test_a_shape_plans_like_its_config_directory(shape: str, tmp_path: Path, capsys) -> None:
    assert main([*PLAN_FLAGS, "--shape", shape]) == 0
    by_shape = json.loads(capsys.readouterr().out)
    directory = write_shape_directory(shape, tmp_path / shape)
    assert main([*PLAN_FLAGS, "--model", str(directory)]) == 0
    by_directory = json.loads(capsys.readouterr().out)
    assert by_shape["read_from"] == f"reference shape {shape}"
    assert by_directory["read_from"] == str(directory.resolve() / "config.json")
    assert by_shape["components"] == by_directory["components"]
    assert by_shape["total_bytes"] == by_directory["total_bytes"] > 0


def test_a_cuda_plan_that_cannot_fit_names_the_component(capsys) -> None:
    assert main([*PLAN_FLAGS[:-1], "15000", "--shape", "llama3-8b"]) == 2
    error = capsys.readouterr().err
    assert "weights (8,030,261,248 parameters x 2 bytes (bfloat16)) takes the total past the limit" in error


def test_a_cuda_plan_needs_no_torch() -> None:
    script = "import sys; sys.modules['torch'] = None\nfrom arbi_grpc.cli import main\nsys.exit(main(sys.argv[1:]))"
    result = subprocess.run([sys.executable, "-c", script, *PLAN_FLAGS, "--shape", "llama3-8b"],
                            check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    components = json.loads(result.stdout)["components"]
    assert components["cuda_graphs"]["bytes"] > 0 and components["allocator_overhead"]["bytes"] > 0


def test_a_tkv_plan_names_the_missing_boundary(capsys) -> None:
    assert main(["plan", "--shape", "qwen3-0.6b", "--kv-cache-dtype", "tkv", "--kv-calibration", "bundle"]) == 2
    assert "plan --kv-cache-dtype tkv" in capsys.readouterr().err
