"""The `arbi-serve` command line, run as real subprocesses against real servers on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from arbi_grpc import __version__
from arbi_grpc.chat_client import wait_until_serving

CLI = [sys.executable, "-m", "arbi_grpc"]
QUESTION = "What is the capital of France?"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _cli(*args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, timeout=timeout,
                          env=os.environ.copy())


@pytest.fixture(scope="module")
def serve_process(smollm2_dir: Path):
    port = _free_port()
    process = subprocess.Popen(
        [*CLI, "serve", "--model", str(smollm2_dir), "--port", str(port), "--kv-cache-memory-mib", "64",
         "--metrics-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    if not wait_until_serving(f"127.0.0.1:{port}", 300, lambda: process.poll() is None):
        process.kill()
        pytest.fail(f"server did not start:\n{process.communicate()[0]}")
    yield port
    process.send_signal(signal.SIGINT)
    process.wait(timeout=30)


def test_version_and_help() -> None:
    assert _cli("--version").stdout.strip() == f"arbi-serve {__version__}"
    help_text = _cli("--help").stdout
    for command in ("serve", "run", "chat", "pull", "list"):
        assert command in help_text


def test_chat_against_running_server(serve_process: int) -> None:
    result = _cli("chat", "--url", f"127.0.0.1:{serve_process}", QUESTION)
    assert result.returncode == 0, result.stderr
    assert "Paris" in result.stdout
    piped = _cli("chat", "--url", f"grpc://127.0.0.1:{serve_process}", stdin=QUESTION + "\n")
    assert "Paris" in piped.stdout


def test_chat_needs_no_torch(serve_process: int) -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from arbi_grpc.cli import main\n"
        f"sys.exit(main(['chat', '--url', '127.0.0.1:{serve_process}', {QUESTION!r}]))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Paris" in result.stdout


def test_chat_error_is_reported(serve_process: int) -> None:
    result = _cli("chat", "--url", f"127.0.0.1:{serve_process}", "--max-tokens", "0", QUESTION)
    assert result.returncode == 1
    assert "INVALID_ARGUMENT" in result.stderr and "max_output_tokens" in result.stderr


def test_run_reuses_a_running_server(serve_process: int) -> None:
    result = _cli("run", "--port", str(serve_process), "--http-port", "0", stdin=QUESTION + "\n")
    assert result.returncode == 0, result.stderr
    assert "Paris" in result.stdout


def test_run_boots_a_server_and_chats(model_cache_dir: Path, smollm2_dir: Path) -> None:
    port, http_port = _free_port(), _free_port()
    result = _cli("run", "--port", str(port), "--http-port", str(http_port), stdin=QUESTION + "\n",
                  timeout=600)
    pid_files = [model_cache_dir / "run" / f"server-{port}.pid",
                 model_cache_dir / "run" / f"gateway-{http_port}.pid"]
    try:
        assert result.returncode == 0, result.stderr
        assert "Paris" in result.stdout
        assert all(pid_file.exists() for pid_file in pid_files)
    finally:
        for pid_file in pid_files:
            if pid_file.exists():
                os.kill(int(pid_file.read_text()), signal.SIGTERM)


def test_list_and_pull_show_the_cached_model(smollm2_dir: Path) -> None:
    pulled = _cli("pull")
    assert pulled.returncode == 0, pulled.stderr
    assert "SmolLM2-135M-Instruct" in pulled.stdout
    assert "SmolLM2-135M-Instruct" in _cli("list").stdout


def test_serve_refuses_an_unsupported_architecture(tmp_path: Path, smollm2_dir: Path) -> None:
    config = json.loads((smollm2_dir / "config.json").read_text())
    config["architectures"] = ["MambaForCausalLM"]
    for name in ("tokenizer.json", "tokenizer_config.json", "model.safetensors"):
        (tmp_path / name).symlink_to(smollm2_dir / name)
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = _cli("serve", "--model", str(tmp_path), "--port", str(_free_port()))
    assert result.returncode == 2
    assert "MambaForCausalLM" in result.stderr and "LlamaForCausalLM" in result.stderr


def test_serve_refuses_truncated_weights(tmp_path: Path, smollm2_dir: Path) -> None:
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).symlink_to(smollm2_dir / name)
    weights = (smollm2_dir / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(weights[: len(weights) // 3])
    result = _cli("serve", "--model", str(tmp_path), "--port", str(_free_port()))
    assert result.returncode == 2
    assert "model.safetensors" in result.stderr


def test_serve_refuses_an_unknown_model() -> None:
    result = _cli("serve", "--model", "no-such-model", "--port", str(_free_port()))
    assert result.returncode == 2
    assert "no-such-model" in result.stderr and "SmolLM2-135M-Instruct" in result.stderr
