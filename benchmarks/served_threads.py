"""Benchmark: one served stream's time per token, and how busy each thread of the server and its gateway was.

Boots `arbi-serve serve` (defaults but `--cpu-weights int4`, plus `--arbi-flags`) and its gateway, as
`cpu_vs_llama_cpp` does, streams one greedy chat completion of `--tokens` tokens (ignore_eos) through the gateway,
and prints the client's milliseconds per token after the first, the time to the first, and each thread that ran
more than 1% of a core meanwhile (its share of one core, from /proc's per-thread CPU times): a step that waits on
something other than its own arithmetic shows as threads well under 100% busy. Linux only; writes JSON to --out.

    python -m benchmarks.served_threads --out bench-results/served_threads.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import tempfile
import time
from datetime import date
from pathlib import Path

from benchmarks.cpu_vs_llama_cpp import arbi_gateway, stream_chat


def thread_ticks(pid: int) -> dict[str, tuple[str, int]]:
    """{thread id: (its name, user + system clock ticks so far)} of process `pid`."""
    ticks = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        stat = (task / "stat").read_text()
        name, fields = stat[stat.index("(") + 1: stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        ticks[task.name] = (name, int(fields[11]) + int(fields[12]))
    return ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--arbi-flags", default="", help="more flags of `arbi-serve serve`, one string")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="arbi-bench-threads-") as scratch, \
            arbi_gateway("", 0, shlex.split(args.arbi_flags), Path(scratch)) as (pids, port):
        stream_chat(port, "", "Say hi", 16)  # warm
        before = {pid: thread_ticks(pid) for pid in pids}
        started = time.perf_counter()
        first_s, tokens = stream_chat(port, "", "Tell me a long story about a dragon.", args.tokens)
        elapsed = time.perf_counter() - started
        after = {pid: thread_ticks(pid) for pid in pids}
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    threads = []
    for process, pid in zip(("server", "gateway"), pids):
        for tid, (name, ticks) in after[pid].items():
            share = (ticks - before[pid].get(tid, (name, 0))[1]) / ticks_per_s / elapsed
            if share > 0.01:
                threads.append({"process": process, "thread": int(tid), "name": name, "core_share": share})
    result = {"date": date.today().isoformat(), "arbi_flags": args.arbi_flags, "tokens": tokens,
              "ms_per_token": (elapsed - first_s) / max(tokens - 1, 1) * 1e3, "ttft_ms": first_s * 1e3,
              "threads": threads}
    print(f"{tokens} tokens: {result['ms_per_token']:.2f} ms a token after the first, TTFT {result['ttft_ms']:.0f} ms")
    for thread in threads:
        print(f"  {thread['process']} thread {thread['thread']} ({thread['name']}): {thread['core_share']:.0%} of a core")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
