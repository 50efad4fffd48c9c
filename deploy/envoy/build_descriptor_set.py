"""Builds the descriptor set Envoy's gRPC-JSON transcoder reads: every proto of `proto/arbi/v1` with all
its imports (google/api for the HTTP annotations, google/rpc for error details, google/protobuf), plus
google/rpc/error_details.proto so Envoy can print the details of a failed call's Status.

Usage: python deploy/envoy/build_descriptor_set.py [--out PATH]   (default: arbi.pb beside this file)
"""

from __future__ import annotations

import argparse
from pathlib import Path

_HERE = Path(__file__).resolve().parent
PROTO_ROOT = _HERE.parent.parent / "proto"


def build_descriptor_set(out: Path, proto_root: Path = PROTO_ROOT) -> Path:
    """Writes the descriptor set to `out`; raises RuntimeError when protoc fails."""
    from grpc_tools import protoc

    sources = sorted(str(path.relative_to(proto_root)) for path in (proto_root / "arbi").rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    out.parent.mkdir(parents=True, exist_ok=True)
    arguments = ["grpc_tools.protoc", f"-I{proto_root}", f"-I{include}", "--include_imports",
                 f"--descriptor_set_out={out}", *sources, "google/rpc/error_details.proto"]
    if protoc.main(arguments) != 0:
        raise RuntimeError(f"protoc failed on {sources}")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=_HERE / "arbi.pb", help="where to write the descriptor set")
    print(build_descriptor_set(parser.parse_args().out))
