"""Every client's example (Go, C++, Ruby, Java, TypeScript/Node) builds with its own build (which runs
`buf generate` with the client's buf.gen.yaml first: no generated code is committed) and, run as a subprocess
against the real in-process server on 127.0.0.1, streams a greedy chat answer and reads the server's
description from the admin API with the admin token."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from arbi_grpc import __version__

CLIENTS = Path(__file__).resolve().parents[2] / "clients"


@dataclass(frozen=True)
class ClientExample:
    """How one language's example is built (in `clients/<directory>`) and run."""

    directory: str
    tools: tuple[str, ...]
    build: Callable[[Path], list[str]]
    run: Callable[[Path], list[str]]


EXAMPLES = {
    "go": ClientExample(
        "go", ("buf", "go", "make"),
        build=lambda out: ["make", "-s", f"BUILD_DIR={out}"],
        run=lambda out: [str(out / "example")],
    ),
    "cpp": ClientExample(
        "cpp", ("buf", "g++", "make", "pkg-config"),
        build=lambda out: ["make", "-s", "-j2", f"BUILD_DIR={out}"],
        run=lambda out: [str(out / "example")],
    ),
    "ruby": ClientExample(
        "ruby", ("buf", "ruby", "make"),
        build=lambda out: ["make", "-s"],
        run=lambda out: ["ruby", str(CLIENTS / "ruby" / "example.rb")],
    ),
    "java": ClientExample(
        "java", ("buf", "javac", "jar", "java", "make"),
        build=lambda out: ["make", "-s", f"BUILD_DIR={out}"],
        run=lambda out: ["java", "-jar", str(out / "example.jar")],
    ),
    "typescript": ClientExample(
        "typescript", ("buf", "node", "npm"),
        build=lambda out: ["npm", "run", "--silent", "build"],
        run=lambda out: ["node", str(CLIENTS / "typescript" / "dist" / "src" / "example.js")],
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("language", sorted(EXAMPLES))
def test_example_generates_and_reads_server_info(language: str, served_smollm2, tmp_path: Path) -> None:
    example = EXAMPLES[language]
    missing = [tool for tool in example.tools if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{language} toolchain missing: {missing}; run `bash tests/setup.sh`")
    built = subprocess.run(example.build(tmp_path), cwd=CLIENTS / example.directory, capture_output=True,
                           text=True, timeout=600)
    assert built.returncode == 0, f"{language} build failed:\n{built.stdout}\n{built.stderr}"

    env = {**os.environ, "ARBI_ADMIN_TOKEN": served_smollm2.credentials.admin_token}
    ran = subprocess.run([*example.run(tmp_path), served_smollm2.target], capture_output=True, text=True,
                         timeout=300, env=env)
    assert ran.returncode == 0, f"{language} example failed:\n{ran.stdout}\n{ran.stderr}"
    answer, finish, server = ran.stdout.splitlines()[-3:]
    assert "Paris" in answer, ran.stdout
    assert finish.startswith("finish: FINISH_REASON_EOS_TOKEN, prompt tokens: "), ran.stdout
    assert server.startswith(f"server: arbi-serve {__version__}, model "), ran.stdout
    assert "(LlamaForCausalLM, " in server, ran.stdout
