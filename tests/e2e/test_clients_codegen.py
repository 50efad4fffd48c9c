"""The client code checked into `clients/` is exactly what `buf generate` makes from `proto/` with the
local plugins of `buf.gen.yaml`: regenerated into a scratch directory and compared file by file."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "buf.gen.yaml"
# The local plugins buf.gen.yaml names (protoc itself runs the builtin cpp, ruby and java generators).
TOOLS = ("buf", "protoc", "protoc-gen-go", "protoc-gen-go-grpc", "grpc_cpp_plugin", "grpc_ruby_plugin",
         "grpc_java_plugin")
TS_PLUGIN = "clients/typescript/node_modules/.bin/protoc-gen-ts_proto"


def output_dirs() -> list[str]:
    """The `out:` directories of buf.gen.yaml, relative to the repository root."""
    dirs = sorted(set(re.findall(r"^\s*out:\s*(\S+)\s*$", TEMPLATE.read_text(), re.MULTILINE)))
    assert dirs, "buf.gen.yaml names no output directory"
    return dirs


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_generated_clients_match_the_protos(tmp_path: Path) -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    missing += [TS_PLUGIN] if not (REPO / TS_PLUGIN).exists() else []
    if missing:
        pytest.fail(f"code generators missing: {missing}; run `bash tests/setup.sh`")
    buf = subprocess.run(["buf", "generate", "--template", str(TEMPLATE), "--output", str(tmp_path)],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert buf.returncode == 0, f"buf generate failed:\n{buf.stderr}"
    stale = []
    for out in output_dirs():
        generated, checked_in = files_under(tmp_path / out), files_under(REPO / out)
        assert generated, f"buf generated nothing into {out}"
        stale += [f"{out}/{name}" for name in sorted(generated.keys() | checked_in.keys())
                  if generated.get(name) != checked_in.get(name)]
    assert not stale, f"generated code out of date (run `buf generate`): {stale}"
