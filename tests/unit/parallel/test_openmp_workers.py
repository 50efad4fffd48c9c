"""`release_openmp_workers`: the OpenMP workers a thread's parallel work started end, in a fresh process (so that
nothing else shares its teams), and parallel work afterwards, on that thread or another, still runs and is right."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import os, threading, time
    import torch
    from arbi_grpc.parallel.threads import release_openmp_workers

    def threads():
        return len(os.listdir("/proc/self/task"))

    torch.set_num_threads(2)
    values = torch.arange(1 << 22, dtype=torch.float64)
    assert float((values * 2).sum()) == (1 << 22) * ((1 << 22) - 1)
    before = threads()
    assert release_openmp_workers()
    deadline = time.monotonic() + 5
    while threads() >= before and time.monotonic() < deadline:
        time.sleep(0.01)
    after = threads()
    result = {}
    worker = threading.Thread(target=lambda: result.update(total=float((values * 3).sum())))
    worker.start()
    worker.join()
    assert result["total"] == 1.5 * (1 << 22) * ((1 << 22) - 1)
    assert float((values * 2).sum()) == (1 << 22) * ((1 << 22) - 1)
    print(before, after)
""")


def test_the_calling_threads_workers_end_and_parallel_work_still_runs() -> None:
    probe = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)

    assert probe.returncode == 0, probe.stderr
    before, after = map(int, probe.stdout.split())
    assert after < before
