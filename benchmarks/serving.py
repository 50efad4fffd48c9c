"""Serving benchmark through the real server: `arbi-serve serve` in a subprocess on a model directory of random
weights of a named shape, driven by client processes (`serving_load`) over gRPC and/or through the gateway
(`--via grpc,gateway`: a gateway subprocess in front of the server, REST /v1/completions streamed), once per KV
cache at the same KV memory: bf16 (the model dtype) against TKV (a uniform calibration of `--kv-bits`, the
default exact window).

Each case boots its own server (prefix cache on, as served) and, for the gateway path, its gateway; each path is
warmed with a few requests, then gets `--requests` fresh random prompts of `--prompt-len` tokens (drawn anew for
every path and case, so no run reuses another's prefix) for `--output-len` tokens each (ignore_eos), at
`--concurrency` in flight or arriving at `--rate` per second. Prints output tok/s, TTFT and TPOT p50/p99 per case
and path, with the running batch limit the server's boot log chose, and writes JSON:

    python -m benchmarks.serving --shape llama3-8b --kv-cache-memory-mib 8192 --requests 64 --concurrency 64 \\
        --prompt-len 2048 --output-len 512 --via grpc,gateway

The model directory (config.json, model.safetensors, the default model's tokenizer files, a TKV bundle) is
written to a temporary directory, or to `--model-dir`, and reused from there when it already holds one (its TKV
bundle directory): the directory's shape is then the caller's to keep the same.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

from arbi_gateway.process import GatewayProcess
from benchmarks.serve_process import start_serve
from benchmarks.serving_load import PATHS, LoadStats, drive, make_plan, summarize

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
BUNDLE_DIR = "tkv-bundle"
BOOT_TIMEOUT_S = 1200.0
RUNNING_LIMIT = re.compile(r"at most (\d+) running requests \((.*?)\); config")  # the boot log's line


def write_model_dir(shape: str, directory: Path, kv_bits: str, device: str, tokenizer_dir: Path | None) -> Path:
    """Random bf16 weights of `shape`, the tokenizer of `tokenizer_dir` (default: the default model's; prompts are
    token ids, ids it lacks decode to nothing) and a uniform TKV bundle of `kv_bits` for those weights."""
    import torch

    from arbi_grpc.config import parse_kv_bits
    from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration
    from arbi_grpc.kv_codec.calibration.fingerprint import model_dir_fingerprint
    from arbi_grpc.kv_codec.spec import TkvSpec
    from arbi_grpc.models.model_cache import DEFAULT_MODEL, resolve_model
    from arbi_grpc.models.random_weights import write_random_checkpoint
    from arbi_grpc.models.reference_shapes import model_config_for_shape, reference_hf_config

    write_random_checkpoint(reference_hf_config(shape), directory, torch.bfloat16, seed=0, device=device)
    tokenizer_dir = tokenizer_dir or resolve_model(DEFAULT_MODEL).directory
    for name in TOKENIZER_FILES:
        shutil.copy(tokenizer_dir / name, directory / name)
    config = model_config_for_shape(shape)
    TkvCalibration.uniform(model_dir_fingerprint(directory), TkvSpec(*parse_kv_bits(kv_bits)), config.num_layers,
                           config.num_kv_heads, config.head_dim).save(directory / BUNDLE_DIR)
    return directory


@dataclass(frozen=True)
class ServerCase:
    """One server configuration: its name in the table and its extra `serve` flags."""

    name: str
    flags: tuple[str, ...]


def cases(model_dir: Path, kv_bits: str) -> list[ServerCase]:
    return [ServerCase("bf16", ()),
            ServerCase(f"TKV K{kv_bits.replace('/', 'V') if '/' in kv_bits else kv_bits + 'V' + kv_bits}",
                       ("--kv-cache-dtype", "tkv", "--kv-calibration", str(model_dir / BUNDLE_DIR),
                        "--kv-bits", kv_bits))]


def start_server(model_dir: Path, common_flags: list[str], case: ServerCase, log_path: Path
                 ) -> tuple[subprocess.Popen, str]:
    """`arbi-serve serve` on a free loopback port, once its health check says SERVING."""
    try:
        return start_serve(["--model", str(model_dir), *common_flags, *case.flags], log_path, BOOT_TIMEOUT_S)
    except RuntimeError as error:
        raise RuntimeError(f"{case.name}: {error}") from None


def stop_server(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass(frozen=True)
class CaseResult:
    """One case's load statistics per path, and the running batch limit its server chose (from its boot log)."""

    by_path: dict[str, LoadStats]
    max_running_requests: int
    running_source: str


def running_limit(log_text: str) -> tuple[int, str]:
    """The running batch limit and its reason from a server's boot log line; RuntimeError when it has none."""
    match = RUNNING_LIMIT.search(log_text)
    if match is None:
        raise RuntimeError("the server's boot log names no running batch limit ('at most N running requests')")
    return int(match[1]), match[2]


def run_path(target: str, path: str, args: argparse.Namespace, vocab_size: int, seed: int | None) -> LoadStats:
    """Warms one path with a few short requests, then runs the measured load through it."""
    drive(target, make_plan(min(4, args.requests), args.prompt_len, 4, vocab_size), 1, path)
    plan = make_plan(args.requests, args.prompt_len, args.output_len, vocab_size,
                     concurrency=args.concurrency, rate_per_s=args.rate, seed=seed)
    timings, start = drive(target, plan, args.client_processes, path)
    return summarize(timings, start)


def run_case(model_dir: Path, case: ServerCase, args: argparse.Namespace, vocab_size: int, paths: list[str],
             log_dir: Path) -> CaseResult:
    common = ["--device", args.device, "--kv-cache-memory-mib", str(args.kv_cache_memory_mib),
              "--max-model-len", str(args.prompt_len + args.output_len), *args.serve_flags.split()]
    log_path = log_dir / f"{case.name}.log"
    process, target = start_server(model_dir, common, case, log_path)
    by_path = {}
    try:
        limit, source = running_limit(log_path.read_text(errors="replace"))
        for index, path in enumerate(paths):
            seed = None if args.seed is None else args.seed + index  # fresh prompts for every path
            if path == "grpc":
                by_path[path] = run_path(target, path, args, vocab_size, seed)
                continue
            with GatewayProcess.spawn(["--upstream", target, "--http-port", "0", "--log-level", "warning"],
                                      log_dir / f"{case.name}-gateway.log") as gateway:
                by_path[path] = run_path(gateway.url, path, args, vocab_size, seed)
    finally:
        stop_server(process)
    return CaseResult(by_path, limit, source)


def _machine(device: str) -> str:
    if device != "cuda":
        return platform.processor() or "cpu"
    import torch

    return torch.cuda.get_device_name()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="llama3-8b")
    parser.add_argument("--model-dir", type=Path, help="where the random model is written (default: a temp dir)")
    parser.add_argument("--tokenizer-dir", type=Path, help="tokenizer files to copy (default: the default model's)")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run of a small shape")
    parser.add_argument("--kv-cache-memory-mib", type=int, default=8192)
    parser.add_argument("--kv-bits", default="4", help="TKV bits: 4, or K/V such as 4/2")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=2048)
    parser.add_argument("--output-len", type=int, default=512)
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight (0: open loop at --rate)")
    parser.add_argument("--rate", type=float, default=math.inf, help="arrivals per second when --concurrency 0")
    parser.add_argument("--client-processes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=None, help="prompt seed (default: fresh each run)")
    parser.add_argument("--cases", default="bf16,tkv", help="which KV caches to run: bf16, tkv or both")
    parser.add_argument("--serve-flags", default="", help="extra `serve` flags for every case, one string")
    parser.add_argument("--via", default="grpc", help="how the clients reach each server, comma-separated: grpc "
                                                      "(its port), gateway (REST /v1/completions, streamed), or both")
    parser.add_argument("--out", type=Path, default=Path("build/serving.json"))
    args = parser.parse_args()
    from arbi_grpc.models.reference_shapes import model_config_for_shape  # no torch: a config dict

    paths = [path.strip() for path in args.via.split(",") if path.strip()]
    if not paths or any(path not in PATHS for path in paths):
        parser.error(f"--via: a comma-separated list of {', '.join(PATHS)}, got {args.via!r}")
    vocab_size = model_config_for_shape(args.shape).vocab_size
    with tempfile.TemporaryDirectory(prefix="arbi-serving-") as scratch:
        model_dir = args.model_dir or Path(scratch) / args.shape
        if not (model_dir / BUNDLE_DIR).is_dir():
            started = time.monotonic()
            write_model_dir(args.shape, model_dir, args.kv_bits, args.device, args.tokenizer_dir)
            print(f"wrote random {args.shape} weights to {model_dir} in {time.monotonic() - started:.0f}s", flush=True)
        wanted = {name.strip() for name in args.cases.split(",")}
        results = {}
        for case in cases(model_dir, args.kv_bits):
            if case.name.split()[0].lower() not in wanted:
                continue
            results[case.name] = run_case(model_dir, case, args, vocab_size, paths, Path(scratch))
            print(case.name, results[case.name], flush=True)
    load = (f"concurrency {args.concurrency}" if args.concurrency else f"rate {args.rate}/s")
    print(f"\n{args.shape}, {args.kv_cache_memory_mib} MiB KV cache, {args.requests} x ({args.prompt_len} + "
          f"{args.output_len}) tokens, {load}, {args.client_processes} client processes")
    print(f"{'KV cache':<10} {'via':<8} {'running':>7} {'out tok/s':>9} {'failed':>6} {'TTFT p50':>9} {'TTFT p99':>9} "
          f"{'TPOT p50':>9} {'TPOT p99':>9}")
    for name, result in results.items():
        for path, row in result.by_path.items():
            print(f"{name:<10} {path:<8} {result.max_running_requests:>7} {row.output_tokens_per_s:9.0f} "
                  f"{row.failed:6d} {row.ttft_p50_ms / 1e3:8.2f}s {row.ttft_p99_ms / 1e3:8.2f}s "
                  f"{row.tpot_p50_ms:7.1f}ms {row.tpot_p99_ms:7.1f}ms")
    for name, result in results.items():
        print(f"{name}: at most {result.max_running_requests} running requests ({result.running_source})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": " ".join(["python -m benchmarks.serving", *sys.argv[1:]]), "date": date.today().isoformat(),
        "machine": _machine(args.device), "python": platform.python_version(), "shape": args.shape,
        "rows": [{"kv_cache": name, "via": path, "max_running_requests": result.max_running_requests,
                  "max_running_requests_source": result.running_source, **asdict(row)}
                 for name, result in results.items() for path, row in result.by_path.items()],
    }, indent=2))


if __name__ == "__main__":
    main()
