"""arbi-serve against llama.cpp's `llama-server` on the CPU, the same GGUF served by both (default: the embedded
SmolLM2-135M-Instruct.Q4_1.gguf), measured in one run on one machine.

Both servers run side by side (one waits while the other is measured) and get the same 20 short chat prompts, `--tokens`
greedy tokens each (ignore_eos), streamed over their OpenAI route /v1/chat/completions (arbi-serve through its
gateway, defaults but `--cpu-weights int4`, plus `--arbi-flags`, e.g. "--cpu-activations int8"), at each
`--concurrency`, in `--rounds` rounds: each round runs every concurrency on both servers in turn (which goes first
alternates), its prompts tagged with the round's number at their start, so no round hits either server's prompt
cache of an earlier one. Reported: each cell's median over the rounds of output tok/s and TTFT p50 (every round in
the JSON), the servers' resident memory (RSS after the runs: arbi-serve's server and its gateway, both needed to
answer the OpenAI route that llama-server answers alone) and the ratios arbi-serve / llama-server of the medians,
the memory's over arbi-serve's two processes together. Prints a table and writes JSON to --out:

    python -m benchmarks.cpu_vs_llama_cpp --out bench-results/cpu_vs_llama_cpp.json

llama-server is found at --llama-server, $LLAMA_SERVER, or in the build cache
(`~/.cache/arbi-serve/llama-cpp`); `--build` builds it there first from the vendored llama.cpp of the
llama-cpp-python sdist (MIT; a separate process, nothing of it is imported), about 15 minutes on 2 cores:

    pip download --no-binary :all: --no-deps llama-cpp-python -d ~/.cache/arbi-serve/llama-cpp
    tar xzf llama_cpp_python-*.tar.gz && cd llama_cpp_python-*/vendor/llama.cpp
    cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF \\
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON
    cmake --build build -j2 --target llama-server

Perplexity (`--perplexity-windows N`, default 16; 0: none; `--perplexity-only` skips the speed runs): wikitext-2's
test file scored by llama.cpp's own `llama-perplexity` (llama-server returns no prompt-token logprobs: its
/v1/completions refuses `echo`) and by arbi-serve through the gateway's /v1/completions (`echo`, `logprobs: 0`,
`max_tokens: 0`), on the same tokens: llama-server's /tokenize of the text as llama-perplexity reads it (the bytes,
CRLF line ends kept), cut into llama-perplexity's chunks of `--perplexity-ctx` tokens (each starting with BOS where
the model adds one), each sent as a token-id prompt and scored on its second half (tokens n_ctx/2 + 1 to n_ctx - 1,
given all before them), llama-perplexity's rule. Reported: both perplexities, their ratio with the standard error
of the paired per-window loss difference, and whether arbi-serve's own tokenization of the text equals llama.cpp's.
`llama-perplexity` is found at
--llama-perplexity, $LLAMA_PERPLEXITY or in the build cache, and `--build` builds it there too (a minute once
llama-server is built: `cmake --build build -j2 --target llama-perplexity`):

    python -m benchmarks.cpu_vs_llama_cpp --perplexity-only --out bench-results/cpu_vs_llama_cpp_ppl.json

Never part of CI.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from arbi_gateway.process import GatewayProcess
from arbi_grpc.models.model_cache import DEFAULT_MODEL, resolve_model
from arbi_grpc.text.tokenizer import TextTokenizer
from benchmarks.serve_process import free_port, start_serve

BUILD_CACHE = Path.home() / ".cache" / "arbi-serve" / "llama-cpp"
DEFAULT_WIKITEXT = Path(__file__).resolve().parents[1] / "tests" / "data" / "wikitext-2" / "wiki.test.raw"
PROMPTS = (
    "What is the capital of France?", "Write a haiku about the sea.", "Explain photosynthesis in one sentence.",
    "List three prime numbers.", "Who wrote Hamlet?", "How do I boil an egg?", "What is a black hole?",
    "Give me a tip for learning to code.", "Why is the sky blue?", "Name a famous painter.",
    "What does a compiler do?", "Describe a cat in two sentences.", "What is 12 times 7?",
    "Suggest a name for a bakery.", "How far is the Moon?", "What is the boiling point of water?",
    "Translate 'good morning' into French.", "What is machine learning?", "Tell me a fun fact about octopuses.",
    "How many continents are there?",
)


def find_llama_cpp_tool(name: str, explicit: str, build: bool) -> Path:
    """llama.cpp's `name` (llama-server, llama-perplexity) at `explicit`, at $LLAMA_SERVER / $LLAMA_PERPLEXITY,
    or in the build cache; with `build`, built into the cache when none is found."""
    variable = name.upper().replace("-", "_")
    candidates = [Path(path) for path in (explicit, os.environ.get(variable, "")) if path]
    candidates += sorted(BUILD_CACHE.glob(f"llama_cpp_python-*/vendor/llama.cpp/build/bin/{name}"))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    if not build:
        raise SystemExit(f"{name} not found: pass --{name}, set ${variable}, or run with --build")
    return build_llama_cpp_tool(name)


def build_llama_cpp_tool(target: str) -> Path:
    """Builds `target` in the cache from the vendored llama.cpp of the llama-cpp-python sdist (see above)."""
    BUILD_CACHE.mkdir(parents=True, exist_ok=True)
    if not list(BUILD_CACHE.glob("llama_cpp_python-*.tar.gz")):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                        "llama-cpp-python", "-d", str(BUILD_CACHE)], check=True)
    archive = sorted(BUILD_CACHE.glob("llama_cpp_python-*.tar.gz"))[-1]
    source = BUILD_CACHE / archive.name.removesuffix(".tar.gz") / "vendor" / "llama.cpp"
    if not source.is_dir():
        subprocess.run(["tar", "xzf", str(archive), "-C", str(BUILD_CACHE)], check=True)
    subprocess.run(["cmake", "-B", "build", "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
                    "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                    "-DLLAMA_BUILD_SERVER=ON"], cwd=source, check=True)
    subprocess.run(["cmake", "--build", "build", "-j2", "--target", target], cwd=source, check=True)
    return source / "build" / "bin" / target


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


@contextmanager
def llama_server(binary: Path, gguf: Path, slots: int, threads: int, log_path: Path) -> Iterator[tuple[int, int]]:
    """llama-server serving `gguf` while the block runs: (its pid, its port)."""
    port = free_port()
    command = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-np", str(slots),
               "-t", str(threads), "-c", str(slots * 1024)]
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        _wait_http(port, "/health", process, log_path)
        yield process.pid, port
    finally:
        process.terminate()
        process.wait(60)


@contextmanager
def arbi_gateway(model: str, torch_threads: int, extra_flags: list[str], scratch: Path
                 ) -> Iterator[tuple[list[int], int]]:
    """arbi-serve (defaults but `--cpu-weights int4`, then `extra_flags`) and its gateway while the block runs:
    (their pids, the gateway's HTTP port)."""
    flags = ["--cpu-weights", "int4", *(["--model", model] if model else []),
             *(["--torch-threads", str(torch_threads)] if torch_threads else []), *extra_flags]
    server, upstream = start_serve(flags, scratch / "arbi.log", timeout_s=900)
    try:
        with GatewayProcess.spawn(["--upstream", upstream, "--http-port", "0", "--log-level", "warning"],
                                  scratch / "gateway.log") as gateway:
            yield [server.pid, gateway.process.pid], int(gateway.url.rsplit(":", 1)[1].split("/")[0])
    finally:
        server.terminate()
        server.wait(60)


def post_json(port: int, path: str, body: dict[str, Any]) -> Any:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    payload = response.read()
    connection.close()
    if response.status != 200:
        raise RuntimeError(f"POST {path}: HTTP {response.status}: {payload[:500]!r}")
    return json.loads(payload)


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


def measure(port: int, model: str, prompts: list[str], concurrency: int, tokens: int) -> dict[str, float]:
    stream_chat(port, model, PROMPTS[0], 8)  # warm
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda prompt: stream_chat(port, model, prompt, tokens), prompts))
    elapsed = time.perf_counter() - start
    generated = sum(count for _, count in results)
    return {"tok_s": generated / elapsed, "ttft_p50_ms": 1e3 * statistics.median(t for t, _ in results),
            "completion_tokens": generated}


@dataclass
class Server:
    """One system under test: its name, the gateway or server port, the model name its route takes, its pids."""

    name: str
    port: int
    model: str
    pids: list[int]


def run_rounds(servers: list[Server], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each server's results: per concurrency its rounds and their medians, then its RSS after all of them."""
    rounds: dict[str, dict[int, list[dict[str, float]]]] = {
        server.name: {c: [] for c in args.concurrency} for server in servers}
    for number in range(args.rounds):
        prompts = [f"({number + 1}) {prompt}" for prompt in PROMPTS]
        for concurrency in args.concurrency:
            for server in servers if number % 2 == 0 else servers[::-1]:
                measured = measure(server.port, server.model, prompts, concurrency, args.tokens)
                rounds[server.name][concurrency].append(measured)
                print(f"  round {number + 1} {server.name} c={concurrency}: {measured}", flush=True)
    results = []
    for server in servers:
        result: dict[str, Any] = {"system": server.name}
        for concurrency, measured in rounds[server.name].items():
            result[f"c{concurrency}"] = {
                "tok_s": statistics.median(m["tok_s"] for m in measured),
                "ttft_p50_ms": statistics.median(m["ttft_p50_ms"] for m in measured), "rounds": measured}
        result["rss_mib"] = [rss_mib(pid) for pid in server.pids]
        results.append(result)
    return results


def wikitext_text(path: Path) -> str:
    """The text llama-perplexity reads from `path` (`-f`): the file's bytes (the repository's copy has CRLF line
    ends, which it keeps) less one final newline."""
    return path.read_bytes().decode("utf-8").removesuffix("\n")


def llama_tokenize(port: int, text: str, add_special: bool) -> list[int]:
    """llama-server's tokens of `text`, special-token strings left as text (llama-perplexity's tokenization)."""
    body = {"content": text, "add_special": add_special, "parse_special": False}
    return post_json(port, "/tokenize", body)["tokens"]


def llama_bos(port: int) -> int | None:
    """The BOS id llama.cpp adds to this model's text (and puts first in every perplexity chunk), or None."""
    with_special, plain = llama_tokenize(port, "a", True), llama_tokenize(port, "a", False)
    return with_special[0] if len(with_special) > len(plain) else None


def first_difference(tokens: list[int], other: list[int]) -> int | None:
    """The first index where two tokenizations differ (a missing token counts), or None when they are equal."""
    index = next((i for i, (a, b) in enumerate(zip(tokens, other)) if a != b), min(len(tokens), len(other)))
    return None if index == len(tokens) == len(other) else index


def perplexity_windows(tokens: list[int], n_ctx: int, count: int, bos: int | None) -> list[list[int]]:
    """llama-perplexity's first `count` chunks: consecutive `n_ctx`-token slices of `tokens`, the first token of
    each replaced by `bos` where the model adds one."""
    if count * n_ctx > len(tokens):
        raise SystemExit(f"the text has {len(tokens)} tokens, fewer than {count} windows of {n_ctx}")
    windows = [tokens[i * n_ctx : (i + 1) * n_ctx] for i in range(count)]
    return [[bos, *window[1:]] if bos is not None else window for window in windows]


def second_half_losses(token_logprobs: list[float | None]) -> list[float]:
    """The losses llama-perplexity scores in a window of n_ctx tokens (from their echoed logprobs): those of
    tokens n_ctx/2 + 1 to n_ctx - 1, each given every token before it."""
    return [-logprob for logprob in token_logprobs[len(token_logprobs) // 2 + 1 :]]


def arbi_window_loss(port: int, model: str, window: list[int]) -> float:
    """The mean scored loss of one window from the gateway's echoed prompt logprobs (no token generated)."""
    body = {"model": model, "prompt": window, "max_tokens": 0, "echo": True, "logprobs": 0, "temperature": 0}
    token_logprobs = post_json(port, "/v1/completions", body)["choices"][0]["logprobs"]["token_logprobs"]
    if len(token_logprobs) != len(window):
        raise RuntimeError(f"expected {len(window)} echoed logprobs, got {len(token_logprobs)}")
    return statistics.fmean(second_half_losses(token_logprobs))


_RUNNING_MEAN_LINE = re.compile(r"\s*\d+\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s*")


def running_mean_losses(output: str) -> list[float]:
    """The running mean loss after each window in llama-perplexity's `--ppl-output-type 1` output (lines of
    offset, perplexity, mean loss, its standard error)."""
    return [float(match[1]) for line in output.splitlines() if (match := _RUNNING_MEAN_LINE.fullmatch(line))]


def window_means(running_means: list[float]) -> list[float]:
    """Each window's own mean loss from the running means over equally many tokens per window."""
    totals = [0.0] + [(i + 1) * mean for i, mean in enumerate(running_means)]
    return [later - earlier for earlier, later in zip(totals, totals[1:])]


def llama_window_losses(binary: Path, gguf: Path, wikitext: Path, n_ctx: int, count: int, threads: int
                        ) -> list[float]:
    """The mean scored loss of each of the first `count` windows by llama-perplexity (one window a batch)."""
    command = [str(binary), "-m", str(gguf), "-f", str(wikitext), "-c", str(n_ctx), "-b", str(n_ctx),
               "--chunks", str(count), "-t", str(threads), "--ppl-output-type", "1"]
    completed = subprocess.run(command, capture_output=True, text=True, check=True)
    running = running_mean_losses(completed.stdout)
    if len(running) != count:
        raise RuntimeError(f"llama-perplexity printed {len(running)} of {count} windows:\n{completed.stderr[-3000:]}")
    return window_means(running)


def paired_ratio(losses: list[float], reference: list[float]) -> tuple[float, float]:
    """(perplexity ratio, its standard error) of per-window mean losses against `reference`'s on the same
    windows (equally many tokens each)."""
    differences = [a - b for a, b in zip(losses, reference, strict=True)]
    ratio = math.exp(statistics.fmean(differences))
    return ratio, ratio * statistics.stdev(differences) / math.sqrt(len(differences))


def perplexity_result(arbi: list[float], llama: list[float], n_ctx: int, tokens: dict[str, Any]) -> dict[str, Any]:
    ratio, error = paired_ratio(arbi, llama)
    return {"windows": len(arbi), "n_ctx": n_ctx, "scored_tokens": len(arbi) * (n_ctx - n_ctx // 2 - 1),
            "arbi_serve": math.exp(statistics.fmean(arbi)), "llama_cpp": math.exp(statistics.fmean(llama)),
            "ratio": ratio, "ratio_standard_error": error, "tokenization": tokens,
            "window_losses": {"arbi_serve": arbi, "llama_cpp": llama}}


def print_perplexity(result: dict[str, Any]) -> None:
    print(f"| wikitext-2 perplexity ({result['windows']} windows of {result['n_ctx']}, "
          f"{result['scored_tokens']:,} tokens) | arbi-serve | llama.cpp | arbi / llama |\n| --- | --- | --- | --- |")
    print(f"| ppl | {result['arbi_serve']:.3f} | {result['llama_cpp']:.3f} | {result['ratio']:.4f}x "
          f"± {result['ratio_standard_error']:.4f} |")
    difference = result["tokenization"]["first_difference"]
    print("tokenizations: " + ("equal" if difference is None else f"differ from token {difference} "
                                                                   "(both sides scored llama.cpp's tokens)"))


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


def arbi_tokens(spec: str, text: str) -> list[int]:
    """arbi-serve's own tokens of `text` for the model `spec` (BOS first where the model asks for it)."""
    return TextTokenizer.from_model_dir(resolve_model(spec).directory).encode(text, add_special_tokens=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON results")
    parser.add_argument("--gguf", type=Path, default=None, help="GGUF to serve (default: the embedded SmolLM2)")
    parser.add_argument("--llama-server", default="", help="path of llama-server (default: $LLAMA_SERVER, cache)")
    parser.add_argument("--llama-perplexity", default="",
                        help="path of llama-perplexity (default: $LLAMA_PERPLEXITY, cache)")
    parser.add_argument("--build", action="store_true", help="build the llama.cpp tools into the cache when not found")
    parser.add_argument("--threads", type=int, default=2, help="llama-server's and llama-perplexity's threads")
    parser.add_argument("--torch-threads", type=int, default=0, help="arbi-serve's threads (0: its default)")
    parser.add_argument("--arbi-flags", default="", help="more flags of `arbi-serve serve`, one string")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every concurrency on both servers")
    parser.add_argument("--perplexity-windows", type=int, default=16,
                        help="wikitext-2 windows scored by both (0: no perplexity; otherwise at least 2)")
    parser.add_argument("--perplexity-ctx", type=int, default=512, help="tokens per perplexity window")
    parser.add_argument("--perplexity-only", action="store_true", help="skip the speed runs")
    parser.add_argument("--wikitext", type=Path, default=DEFAULT_WIKITEXT, help="wikitext-2's wiki.test.raw")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.perplexity_windows == 1 or (args.perplexity_only and not args.perplexity_windows):
        parser.error("--perplexity-windows must be 0 or at least 2, and not 0 with --perplexity-only")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    server_binary = find_llama_cpp_tool("llama-server", args.llama_server, args.build)
    perplexity_binary = (find_llama_cpp_tool("llama-perplexity", args.llama_perplexity, args.build)
                         if args.perplexity_windows else None)
    gguf = args.gguf or embedded_gguf()
    model_spec, model_name = (str(gguf), gguf.stem) if args.gguf else (DEFAULT_MODEL, DEFAULT_MODEL)
    text = wikitext_text(args.wikitext)
    results, windows, llama_tokens = [], [], []
    with tempfile.TemporaryDirectory(prefix="arbi-bench-llama-") as scratch:
        with llama_server(server_binary, gguf, max(args.concurrency), args.threads, Path(scratch, "llama.log")
                          ) as (pid, llama_port), \
                arbi_gateway(str(args.gguf or ""), args.torch_threads, shlex.split(args.arbi_flags), Path(scratch)
                             ) as (pids, arbi_port):
            if not args.perplexity_only:
                results = run_rounds([Server("arbi-serve", arbi_port, model_name, pids),
                                      Server("llama-server", llama_port, "", [pid])], args)
            if args.perplexity_windows:  # llama-server's tokens are the ones both sides score
                llama_tokens = llama_tokenize(llama_port, text, add_special=True)
                windows = perplexity_windows(llama_tokens, args.perplexity_ctx, args.perplexity_windows,
                                             llama_bos(llama_port))
            arbi_losses = [arbi_window_loss(arbi_port, model_name, window) for window in windows]
    payload = {"date": date.today().isoformat(), "machine": f"{platform.machine()} {os.cpu_count()} cores",
               "gguf": str(gguf), "llama_server": str(server_binary), "arbi_flags": args.arbi_flags,
               "tokens": args.tokens, "prompts": len(PROMPTS), "rounds": args.rounds, "results": results}
    if results:
        print(f"medians of {args.rounds} rounds")
        print_table(results, args.concurrency)
    if windows:
        llama_losses = llama_window_losses(perplexity_binary, gguf, args.wikitext, args.perplexity_ctx,
                                           len(windows), args.threads)
        own_tokens = arbi_tokens(model_spec, text)
        tokenization = {"llama_cpp_tokens": len(llama_tokens), "arbi_serve_tokens": len(own_tokens),
                        "first_difference": first_difference(llama_tokens, own_tokens)}
        payload["llama_perplexity"] = str(perplexity_binary)
        payload["perplexity"] = perplexity_result(arbi_losses, llama_losses, args.perplexity_ctx, tokenization)
        print_perplexity(payload["perplexity"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
