"""`doctor`, `config`, `ps` and `stop` as real subprocesses; `doctor` and `config` also with torch made
unimportable, as on a client-only install."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.serve_process import free_port, run_cli, start_serve

NO_TORCH = "import sys; sys.modules['torch'] = None\nfrom arbi_grpc.cli import main\nsys.exit(main(sys.argv[1:]))"


def _run_without_torch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_TORCH, *args], check=False, capture_output=True, text=True,
                          timeout=120)


def test_doctor_reports_each_check(model_cache_dir: Path) -> None:
    result = run_cli("doctor", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    checks = {check["name"]: check for check in json.loads(result.stdout)}
    for name in ("python", "grpcio", "torch import", "cuda", "nvidia driver", "cache directory", "memory"):
        assert name in checks
    assert checks["torch import"]["status"] == "ok"
    assert checks["cache directory"]["status"] == "ok"
    assert checks["cache directory"]["detail"].startswith(f"{model_cache_dir}: writable")


def test_doctor_works_without_torch(model_cache_dir: Path) -> None:
    result = _run_without_torch("doctor", "--json")
    assert result.returncode == 0, result.stderr
    checks = {check["name"]: check for check in json.loads(result.stdout)}
    assert checks["torch import"]["status"] == "warn" and "serve" in checks["torch import"]["detail"]
    assert checks["cuda"]["detail"] == "unknown without torch"


def test_doctor_fails_on_an_unwritable_cache(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = run_cli("doctor", env={**os.environ, "ARBI_CACHE_DIR": str(blocker / "cache")})
    assert result.returncode == 1
    assert "fail" in result.stdout and "ARBI_CACHE_DIR" in result.stdout


def test_config_flags_explain_and_resolve(model_cache_dir: Path) -> None:
    flags = _run_without_torch("config", "flags")
    assert flags.returncode == 0, flags.stderr
    for flag, env in (("--kv-cache-memory-mib", "ARBI_KV_CACHE_MEMORY_MIB"), ("--metrics-port", "ARBI_METRICS_PORT"),
                      ("--port", "ARBI_PORT"), ("--memory-limit-mib", "ARBI_MEMORY_LIMIT_MIB")):
        assert any(line.split()[:2] == [flag, env] for line in flags.stdout.splitlines()), flag

    env = {**os.environ, "ARBI_KV_CACHE_MEMORY_MIB": "96", "ARBI_ADMIN_TOKEN": "a-very-secret-admin-token"}
    explained = run_cli("config", "explain", "--kv-cache-memory-mib", env=env)
    assert explained.returncode == 0, explained.stderr
    assert "default:     0" in explained.stdout
    assert "96 (from environment ARBI_KV_CACHE_MEMORY_MIB" in explained.stdout

    resolved = run_cli("config", "resolve", "--json", "--max-step-tokens", "128", "--kv-cache-memory-mib", "80",
                       env=env)
    assert resolved.returncode == 0, resolved.stderr
    settings = json.loads(resolved.stdout)
    assert settings["kv_cache_memory_mib"] == {"value": 80, "source": "flag --kv-cache-memory-mib"}
    assert settings["max_step_tokens"] == {"value": 128, "source": "flag --max-step-tokens"}
    assert settings["block_size"] == {"value": 16, "source": "default"}
    assert settings["admin_token"] == {"value": "(set)", "source": "environment ARBI_ADMIN_TOKEN"}
    assert "a-very-secret-admin-token" not in resolved.stdout

    invalid = run_cli("config", "resolve", "--block-size", "0")
    assert invalid.returncode == 2 and "block_size" in invalid.stderr
    unknown = run_cli("config", "explain", "kv-cache")
    assert unknown.returncode == 2 and "--kv-cache-memory-mib" in unknown.stderr


@pytest.mark.slow
def test_ps_and_stop_manage_what_run_started(tmp_path: Path, smollm2_dir: Path) -> None:
    env = {**os.environ, "ARBI_CACHE_DIR": str(tmp_path)}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    served = start_serve(smollm2_dir, run_dir / "booting.log", "--kv-cache-memory-mib", "32", env=env)
    try:
        # As `run` records them: <kind>-<port>.pid beside <kind>-<port>.log.
        (run_dir / f"server-{served.port}.pid").write_text(f"{served.process.pid}\n")
        served.log_path.rename(run_dir / f"server-{served.port}.log")
        gone_port, reused_port = free_port(), free_port()
        (run_dir / f"gateway-{gone_port}.pid").write_text("999999999\n")
        # A pid now running another program (this test) must be reported exited and never signalled.
        (run_dir / f"server-{reused_port}.pid").write_text(f"{os.getpid()}\n")

        listing = run_cli("ps", env=env)
        assert listing.returncode == 0, listing.stderr
        rows = {(line.split()[0], line.split()[1]): line.split() for line in listing.stdout.splitlines()[1:]}
        assert rows[("server", str(served.port))][2:4] == [str(served.process.pid), "serving"]
        assert str(smollm2_dir) in rows[("server", str(served.port))]
        assert rows[("gateway", str(gone_port))][3] == "exited"
        assert rows[("server", str(reused_port))][3] == "exited"

        missing = run_cli("stop", str(free_port()), env=env)
        assert missing.returncode == 2 and "nothing started" in missing.stderr
        stopped = run_cli("stop", "--all", env=env, timeout=120)
        assert stopped.returncode == 0, stopped.stderr
        assert f"server on port {served.port} (pid {served.process.pid}): stopped (SIGINT)" in stopped.stdout
        assert f"gateway on port {gone_port} (pid 999999999): had already exited" in stopped.stdout
        assert f"server on port {reused_port} (pid {os.getpid()}): had already exited" in stopped.stdout
        assert served.process.wait(timeout=30) == 0  # the graceful path: SIGINT drains, then serve exits 0
        assert not list(run_dir.glob("*.pid"))
        assert "nothing started" in run_cli("ps", env=env).stdout
    finally:
        if served.process.poll() is None:
            served.process.send_signal(signal.SIGKILL)
            served.process.wait()
