"""arbi-serve against llama.cpp's `llama-server` on the CPU, the same GGUF served by both (default: the embedded
SmolLM2-135M-Instruct.Q4_1.gguf), measured in one run on one machine.

Both get the same 20 short chat prompts, `--tokens` greedy tokens each (ignore_eos), streamed over their
OpenAI route /v1/chat/completions (arbi-serve through its gateway, defaults but `--cpu-weights int4`), at each
`--concurrency`;
reported: output tok/s, TTFT p50, the servers' resident memory (RSS after the runs: arbi-serve's server and its
gateway, both needed to answer the OpenAI route that llama-server answers alone) and the ratios arbi-serve /
llama-server, the memory's over arbi-serve's two processes together. Prints a table and writes JSON to --out:

    python -m benchmarks.cpu_vs_llama_cpp --out bench-results/cpu_vs_llama_cpp.json

llama-server is found at --llama-server, $LLAMA_SERVER, or in the build cache
(`~/.cache/arbi-serve/llama-cpp`); `--build` builds it there first from the vendored llama.cpp of the
llama-cpp-python sdist (MIT; a separate process, nothing of it is imported), about 15 minutes on 2 cores:

    pip download --no-binary :all: --no-deps llama-cpp-python -d ~/.cache/arbi-serve/llama-cpp
    tar xzf llama_cpp_python-*.tar.gz && cd llama_cpp_python-*/vendor/llama.cpp
    cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF \\
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON
    cmake --build build -j2 --target llama-server

Never part of CI.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path
from typing import Any

from arbi_gateway.process import GatewayProcess
from arbi_grpc.models.model_cache import DEFAULT_MODEL
from benchmarks.serve_process import free_port, start_serve

BUILD_CACHE = Path.home() / ".cache" / "arbi-serve" / "llama-cpp"
PROMPTS = (
    "What is the capital of France?", "Write a haiku about the sea.", "Explain photosynthesis in one sentence.",
    "List three prime numbers.", "Who wrote Hamlet?", "How do I boil an egg?", "What is a black hole?",
    "Give me a tip for learning to code.", "Why is the sky blue?", "Name a famous painter.",
    "What does a compiler do?", "Describe a cat in two sentences.", "What is 12 times 7?",
    "Suggest a name for a bakery.", "How far is the Moon?", "What is the boiling point of water?",
    "Translate 'good morning' into French.", "What is machine learning?", "Tell me a fun fact about octopuses.",
    "How many continents are there?",
)


def find_llama_server(explicit: str, build: bool) -> Path:
    candidates = [Path(explicit)] if explicit else []
    if os.environ.get("LLAMA_SERVER"):
        candidates.append(Path(os.environ["LLAMA_SERVER"]))
    candidates += sorted(BUILD_CACHE.glob("llama_cpp_python-*/vendor/llama.cpp/build/bin/llama-server"))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    if not build:
        raise SystemExit("llama-server not found: pass --llama-server, set $LLAMA_SERVER, or run with --build")
    return build_llama_server()


def build_llama_server() -> Path:
    BUILD_CACHE.mkdir(parents=True, exist_ok=True)
    if not list(BUILD_CACHE.glob("llama_cpp_python-*.tar.gz")):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                        "llama-cpp-python", "-d", str(BUILD_CACHE)], check=True)
    archive = sorted(BUILD_CACHE.glob("llama_cpp_python-*.tar.gz"))[-1]
    subprocess.run(["tar", "xzf", str(archive), "-C", str(BUILD_CACHE)], check=True)
    source = BUILD_CACHE / archive.name.removesuffix(".tar.gz") / "vendor" / "llama.cpp"
    subprocess.run(["cmake", "-B", "build", "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
                    "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                    "-DLLAMA_BUILD_SERVER=ON"], cwd=source, check=True)
    subprocess.run(["cmake", "--build", "build", "-j2", "--target", "llama-server"], cwd=source, check=True)
    return source / "build" / "bin" / "llama-server"


def embedded_gguf() -> Path:
    from arbi_grpc.memory.model_source import read_model_source

    return Path(read_model_source(DEFAULT_MODEL).read_from)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _wait_http(port: int, path: str, process: subprocess.Popen, log_path: Path, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", path)
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    process.kill()
    raise RuntimeError(f"server did not become ready:\n{log_path.read_text(errors='replace')[-3000:]}")


def start_llama_server(binary: Path, gguf: Path, slots: int, threads: int, log_path: Path
                       ) -> tuple[subprocess.Popen, int]:
    port = free_port()
    command = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-np", str(slots),
               "-t", str(threads), "-c", str(slots * 1024)]
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
    _wait_http(port, "/health", process, log_path)
    return process, port


def start_arbi_server(model: str, torch_threads: int, log_path: Path) -> tuple[subprocess.Popen, str]:
    flags = ["--cpu-weights", "int4", *(["--model", model] if model else []),
             *(["--torch-threads", str(torch_threads)] if torch_threads else [])]
    return start_serve(flags, log_path, timeout_s=900)


def stream_chat(port: int, model: str, prompt: str, tokens: int) -> tuple[float, int]:
    """(seconds to the first content chunk, completion tokens) of one streamed greedy chat completion."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": tokens,
            "temperature": 0, "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    start = time.perf_counter()
    connection.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:500]!r}")
    first, completion_tokens = None, 0
    for raw in response:
        line = raw.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[5:])
        if first is None and any((choice.get("delta") or {}).get("content") for choice in chunk.get("choices", [])):
            first = time.perf_counter() - start
        if chunk.get("usage"):
            completion_tokens = chunk["usage"]["completion_tokens"]
    connection.close()
    return (first if first is not None else time.perf_counter() - start), completion_tokens


def measure(port: int, model: str, concurrency: int, tokens: int) -> dict[str, float]:
    stream_chat(port, model, PROMPTS[0], 8)  # warm
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda prompt: stream_chat(port, model, prompt, tokens), PROMPTS))
    elapsed = time.perf_counter() - start
    generated = sum(count for _, count in results)
    return {"tok_s": generated / elapsed, "ttft_p50_ms": 1e3 * statistics.median(t for t, _ in results),
            "completion_tokens": generated}


def run_system(name: str, port: int, model: str, pids: list[int], args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"system": name}
    for concurrency in args.concurrency:
        result[f"c{concurrency}"] = measure(port, model, concurrency, args.tokens)
        print(f"  {name} c={concurrency}: {result[f'c{concurrency}']}", flush=True)
    result["rss_mib"] = [rss_mib(pid) for pid in pids]
    return result


def print_table(results: list[dict[str, Any]], concurrency: list[int]) -> None:
    head = ["system"] + [f"{c} stream{'s' if c > 1 else ''} tok/s" for c in concurrency] + ["TTFT p50 (1 stream)",
                                                                                          "RSS MiB"]
    print("| " + " | ".join(head) + " |\n|" + " --- |" * len(head))
    for row in results:
        rss = " + ".join(f"{value:,.0f}" for value in row["rss_mib"])
        cells = [row["system"]] + [f"{row[f'c{c}']['tok_s']:.1f}" for c in concurrency]
        cells += [f"{row[f'c{concurrency[0]}']['ttft_p50_ms']:.0f} ms", rss]
        print("| " + " | ".join(cells) + " |")
    arbi, llama = results[0], results[1]
    ratios = [f"{arbi[f'c{c}']['tok_s'] / llama[f'c{c}']['tok_s']:.2f}x" for c in concurrency]
    ttft = arbi[f"c{concurrency[0]}"]["ttft_p50_ms"] / llama[f"c{concurrency[0]}"]["ttft_p50_ms"]
    rss = sum(arbi["rss_mib"]) / sum(llama["rss_mib"])
    print("| arbi / llama | " + " | ".join(ratios) + f" | {ttft:.2f}x | {rss:.2f}x |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON results")
    parser.add_argument("--gguf", type=Path, default=None, help="GGUF to serve (default: the embedded SmolLM2)")
    parser.add_argument("--llama-server", default="", help="path of llama-server (default: $LLAMA_SERVER, cache)")
    parser.add_argument("--build", action="store_true", help="build llama-server into the cache when not found")
    parser.add_argument("--threads", type=int, default=2, help="llama-server's threads")
    parser.add_argument("--torch-threads", type=int, default=0, help="arbi-serve's threads (0: its default)")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    args = parser.parse_args(argv)
    binary = find_llama_server(args.llama_server, args.build)
    gguf = args.gguf or embedded_gguf()
    model_name = gguf.stem if args.gguf else DEFAULT_MODEL
    results = []
    with tempfile.TemporaryDirectory(prefix="arbi-bench-llama-") as scratch:
        server, upstream = start_arbi_server(str(gguf) if args.gguf else "", args.torch_threads,
                                             Path(scratch, "arbi.log"))
        try:
            with GatewayProcess.spawn(["--upstream", upstream, "--http-port", "0", "--log-level", "warning"],
                                      Path(scratch, "gateway.log")) as gateway:
                port = int(gateway.url.rsplit(":", 1)[1].split("/")[0])
                results.append(run_system("arbi-serve", port, model_name, [server.pid, gateway.process.pid], args))
        finally:
            server.terminate()
            server.wait(60)
        llama, port = start_llama_server(binary, gguf, max(args.concurrency), args.threads, Path(scratch, "llama.log"))
        try:
            results.append(run_system("llama-server", port, "", [llama.pid], args))
        finally:
            llama.terminate()
            llama.wait(60)
    print_table(results, args.concurrency)
    payload = {"date": date.today().isoformat(), "machine": f"{platform.machine()} {os.cpu_count()} cores",
               "gguf": str(gguf), "llama_server": str(binary), "tokens": args.tokens, "prompts": len(PROMPTS),
               "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
