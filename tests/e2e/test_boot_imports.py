"""A booted `arbi-serve serve` holds only what its requests use: it maps neither xgrammar's library (xgrammar
imports transformers too) nor triton's (torch._dynamo imports it), read from the server's /proc/PID/maps, until a
request with an output constraint arrives, which loads xgrammar and is answered within its constraint."""

from __future__ import annotations

from pathlib import Path

import pytest

from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from tests.e2e.helpers import chat_request, generate, stub_for
from tests.e2e.serve_process import start_serve

XGRAMMAR_LIBRARY = "libxgrammar_bindings"
TRITON_LIBRARY = "libtriton"


def _mapped(pid: int, library: str) -> bool:
    return library in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.parametrize("cpu_weights", ["float", "int4"])
def test_xgrammar_and_dynamo_load_only_when_used(smollm2_dir: Path, tmp_path: Path, cpu_weights: str) -> None:
    served = start_serve(smollm2_dir, tmp_path / "serve.log", "--kv-cache-memory-mib", "64", "--no-audio",
                         "--cpu-weights", cpu_weights)
    channel, stub = stub_for(served.target)
    try:
        pid = served.process.pid
        assert generate(stub, chat_request("What is the capital of France?", max_output_tokens=8)).text
        assert not _mapped(pid, XGRAMMAR_LIBRARY) and not _mapped(pid, TRITON_LIBRARY)
        request = chat_request("Is the sky green?", max_output_tokens=8)
        request.sampling.output_constraint.CopyFrom(
            types_pb.OutputConstraint(choice=types_pb.ChoiceConstraint(choices=["yes", "no"])))
        assert generate(stub, request).text in ("yes", "no")
        assert _mapped(pid, XGRAMMAR_LIBRARY) and not _mapped(pid, TRITON_LIBRARY)
    finally:
        channel.close()
        served.stop()
