"""The soak and fault harness (benchmarks/soak.py) for 60 seconds at 64 concurrent operations against a real
server and gateway: every invariant it checks holds (expected codes only, no stuck requests, no leaked KV
blocks, resident memory growth under 10%, the follow-up answer unchanged)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import soak


def test_soak_for_60_seconds_keeps_every_invariant(smollm2_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "soak.json"
    status = soak.main(["--model", str(smollm2_dir), "--duration-s", "60", "--concurrency", "64",
                        "--torch-threads", "1", "--out", str(out)])
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["failures"] == [], printed
    assert status == 0
    assert all(report["codes"].values()), printed  # every kind of operation ran
    assert report["stuck_requests"] == 0 and report["kv_used_blocks"] == 0
