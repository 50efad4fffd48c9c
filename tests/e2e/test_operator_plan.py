"""`arbi-serve plan` estimates the session server's measured budget within 10%, from config.json or the
GGUF metadata, with torch unimportable (so no weights can be loaded)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from arbi_grpc.models.model_cache import DEFAULT_MODEL

PLAN_WITHOUT_TORCH = (
    "import sys; sys.modules['torch'] = None\nfrom arbi_grpc.cli import main\nsys.exit(main(sys.argv[1:]))"
)


def _plan(model: str, served) -> dict:
    config = served.config
    # The session server's first model is built without AudioService's reservation; one an admin test reloaded
    # through the server's loader has it.
    audio = "--audio" if any(c.name == "audio_models" for c in served.memory_budget.components) else "--no-audio"
    result = subprocess.run(
        [sys.executable, "-c", PLAN_WITHOUT_TORCH, "plan", "--json", audio, "--model", model,
         "--max-context", str(served.max_model_len), "--kv-cache-memory-mib", str(config.kv_cache_memory_mib),
         "--max-step-tokens", str(config.max_step_tokens),
         "--max-running-requests", str(config.max_running_requests)],
        check=False, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_plan_is_within_ten_percent_of_the_measured_budget(served_smollm2, smollm2_dir: Path) -> None:
    served = served_smollm2.served
    measured = served.memory_budget.as_dict()
    for model in (str(smollm2_dir), DEFAULT_MODEL):  # config.json of the import, and the GGUF's metadata
        plan = _plan(model, served)
        assert plan["method"] == "estimated" and plan["max_model_len"] == served.max_model_len
        assert abs(plan["total_bytes"] - measured["total_bytes"]) <= 0.10 * measured["total_bytes"], (plan, measured)
        for exact in ("weights", "kv_cache"):
            assert plan["components"][exact]["bytes"] == measured["components"][exact]["bytes"]
        activations = measured["components"]["activations"]["bytes"]
        assert abs(plan["components"]["activations"]["bytes"] - activations) <= 0.10 * activations


def test_plan_reserves_the_audio_models_unless_told_not_to(served_smollm2) -> None:
    from arbi_grpc.audio.memory import estimated_audio_component

    served = served_smollm2.served
    with_audio = subprocess.run(
        [sys.executable, "-c", PLAN_WITHOUT_TORCH, "plan", "--json", "--model", DEFAULT_MODEL,
         "--kv-cache-memory-mib", str(served.config.kv_cache_memory_mib)],
        check=False, capture_output=True, text=True, timeout=120,
    )
    assert with_audio.returncode == 0, with_audio.stderr
    components = json.loads(with_audio.stdout)["components"]
    assert components["audio_models"]["bytes"] == estimated_audio_component().num_bytes
