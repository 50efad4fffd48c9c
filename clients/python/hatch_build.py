"""Generates the Python gRPC stubs from `proto/` at build time (hatch build hook and a CLI).

The stubs land in `arbi_client/arbi/v1/` beside this file. protoc writes absolute imports rooted at
the proto package (`from arbi.v1 import ...`); they are re-rooted under `arbi_client.` so the generated
modules never claim a top-level `arbi` package. Nothing here is edited by hand.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

_HERE = Path(__file__).resolve().parent
PACKAGE_DIR = _HERE / "arbi_client"
_IMPORT = re.compile(r"^(from|import) arbi\.v1\b", re.MULTILINE)


def find_proto_root(start: Path) -> Path:
    """The `proto/` directory of the repository that holds `start`."""
    for candidate in (start, *start.parents):
        if (candidate / "proto" / "arbi" / "v1").is_dir():
            return candidate / "proto"
    raise FileNotFoundError(f"no proto/arbi/v1 directory above {start}")


def generate_stubs(proto_root: Path, package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """Runs protoc over every `arbi/v1/*.proto`; returns the written files."""
    from grpc_tools import protoc  # build-time dependency only

    sources = sorted(str(p.relative_to(proto_root)) for p in (proto_root / "arbi").rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as scratch:
        args = [
            "grpc_tools.protoc",
            f"-I{proto_root}",
            f"-I{include}",
            f"--python_out={scratch}",
            f"--pyi_out={scratch}",
            f"--grpc_python_out={scratch}",
            *sources,
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {sources}")
        target = package_dir / "arbi"
        shutil.rmtree(target, ignore_errors=True)
        written = []
        for generated in sorted(Path(scratch, "arbi").rglob("*.py*")):
            destination = target / generated.relative_to(Path(scratch, "arbi"))
            destination.parent.mkdir(parents=True, exist_ok=True)
            text = _IMPORT.sub(r"\1 arbi_client.arbi.v1", generated.read_text())
            destination.write_text(text)
            written.append(destination)
        for package in {p.parent for p in written} | {target}:
            (package / "__init__.py").touch()
    return written


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # running as a plain script
    BuildHookInterface = object  # type: ignore[assignment,misc]


class ProtoStubsBuildHook(BuildHookInterface):  # type: ignore[misc,valid-type]
    """Regenerates the stubs before every wheel or editable build."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        written = generate_stubs(find_proto_root(Path(self.root)))
        root = Path(self.root)
        build_data["artifacts"].extend(
            str(p.relative_to(root)) for p in written if p.is_relative_to(root)
        )
        build_data["artifacts"].append(str((PACKAGE_DIR / "arbi").relative_to(root)) + "/**/__init__.py")


if __name__ == "__main__":
    for path in generate_stubs(find_proto_root(_HERE)):
        print(path.relative_to(_HERE), file=sys.stderr)
