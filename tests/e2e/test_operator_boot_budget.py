"""A boot whose context or batch cannot fit fails at once, before loading weights, with a message naming
the component and its numbers and a non-zero exit status; `plan` refuses the same flags the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.serve_process import free_port, run_cli


@pytest.mark.parametrize(("flags", "expected"), [
    (("--max-model-len", "8192", "--kv-cache-memory-mib", "16"),
     ("the KV cache does not fit", "max_model_len=8192", "kv_cache_memory_mib=16", "needs 512 blocks (360.0 MiB)")),
    (("--memory-limit-mib", "64"),
     ("does not fit", "weights (134,515,008 parameters", "92.1 MiB", "of 64.0 MiB (memory_limit_mib=64)")),
    (("--max-step-tokens", "65536", "--memory-limit-mib", "8192"),
     ("does not fit", "activations (step of 65536 tokens", "--max-step-tokens")),
    (("--max-model-len", "9000",), ("max_model_len: 9000 exceeds the model's context of 8192 tokens",)),
])
def test_boot_that_cannot_fit_fails_naming_the_component(smollm2_dir: Path, flags: tuple[str, ...],
                                                         expected: tuple[str, ...]) -> None:
    boot = run_cli("serve", "--model", str(smollm2_dir), "--port", str(free_port()), *flags)
    assert boot.returncode == 2, boot.stderr
    error_line = boot.stderr.strip().splitlines()[-1]
    assert error_line.startswith("arbi-serve: error:")
    for fragment in expected:
        assert fragment in error_line, error_line

    plan = run_cli("plan", "--model", str(smollm2_dir), *flags)
    assert plan.returncode == 2
    assert plan.stderr.strip().splitlines()[-1] == error_line.replace("(measured", "(estimated")
