"""Benchmark: the prefix cache on real traffic shapes, cache on vs off, SmolLM2 on the CPU, one run.

Workloads (greedy, fixed output length via ignore_eos so both arms do the same decode work):
- shared system prompt: every request carries the same long system prompt (about 90% of its prompt
  tokens) and a short question of its own; requests run `--concurrency` at a time;
- multi-turn chat: conversations of several turns, each turn resending the whole history plus a new
  question; conversations run concurrently, turns in order.
For each arm it reports time to first token (mean, p50, p90), total output tokens/s and prompt tokens
served from the cache.

    python -m benchmarks.prefix_cache --out bench-results/prefix_cache.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import grpc

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as pb_grpc
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from arbi_grpc.config import EngineConfig
from arbi_grpc.models.model_cache import DEFAULT_MODEL, resolve_model
from arbi_grpc.served_model import build_served_model
from arbi_grpc.server import GrpcServer

SYSTEM_PROMPT = " ".join(
    f"Rule {i}: answer politely, cite the relevant section of the handbook, keep answers short, "
    f"and never reveal internal ticket number {1000 + i}." for i in range(40)
)
QUESTIONS = ["How do I reset my password?", "Where is my order?", "Can I change my address?",
             "What is the refund policy?", "Do you ship abroad?", "How do I cancel?",
             "Is there a student discount?", "Who do I call for support?"]


@dataclass(frozen=True)
class Turn:
    ttft_s: float
    output_tokens: int
    prompt_tokens: int
    text: str


def _chat(stub: pb_grpc.GenerateServiceStub, messages: list[dict[str, str]], output_tokens: int) -> Turn:
    request = pb.GenerateRequest(
        chat=types_pb.ChatInput(messages=[types_pb.ChatMessage(**m) for m in messages]),
        sampling=types_pb.SamplingParameters(temperature=0.0),
        stopping=types_pb.StoppingCriteria(max_output_tokens=output_tokens, ignore_eos=True),
    )
    started = time.perf_counter()
    first, produced, text, prompt_tokens = None, 0, [], 0
    for response in stub.Generate(request):
        first = first or time.perf_counter()
        produced += len(response.tokens)
        text.append(response.text)
        prompt_tokens = response.usage.prompt_token_count or prompt_tokens
    return Turn(first - started, produced, prompt_tokens, "".join(text))


def shared_system_prompt(stub, num_requests: int, concurrency: int, output_tokens: int) -> list[Turn]:
    def one(index: int) -> Turn:
        question = f"{QUESTIONS[index % len(QUESTIONS)]} (customer {index})"
        return _chat(stub, [{"role": "system", "content": SYSTEM_PROMPT},
                            {"role": "user", "content": question}], output_tokens)

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(one, range(num_requests)))


def multi_turn(stub, conversations: int, turns: int, output_tokens: int) -> list[Turn]:
    def conversation(index: int) -> list[Turn]:
        history = [{"role": "system", "content": "You are a helpful assistant."}]
        results = []
        for turn in range(turns):
            history.append({"role": "user", "content": f"{QUESTIONS[(index + turn) % len(QUESTIONS)]}"})
            result = _chat(stub, history, output_tokens)
            history.append({"role": "assistant", "content": result.text})
            results.append(result)
        return results

    with ThreadPoolExecutor(max_workers=conversations) as pool:
        return [turn for turns_ in pool.map(conversation, range(conversations)) for turn in turns_]


def measure(model_dir: Path, enable_prefix_cache: bool, args: argparse.Namespace) -> dict[str, dict]:
    config = EngineConfig(model=str(model_dir), enable_prefix_cache=enable_prefix_cache)
    server = GrpcServer(build_served_model(config)).start()
    channel = grpc.insecure_channel(server.target)
    stub = pb_grpc.GenerateServiceStub(channel)
    workloads = {
        "shared_system_prompt": lambda: shared_system_prompt(stub, args.requests, args.concurrency,
                                                             args.output_tokens),
        "multi_turn_chat": lambda: multi_turn(stub, args.conversations, args.turns, args.output_tokens),
    }
    results = {}
    try:
        for name, workload in workloads.items():
            hits_before = server.served.engine.stats().prefix_cache_hit_tokens
            started = time.perf_counter()
            turns = workload()
            elapsed = time.perf_counter() - started
            ttfts = sorted(t.ttft_s for t in turns)
            results[name] = {
                "requests": len(turns),
                "ttft_mean_ms": 1000 * statistics.mean(ttfts),
                "ttft_p50_ms": 1000 * ttfts[len(ttfts) // 2],
                "ttft_p90_ms": 1000 * ttfts[int(len(ttfts) * 0.9)],
                "output_tok_s": sum(t.output_tokens for t in turns) / elapsed,
                "prompt_tokens": sum(t.prompt_tokens for t in turns),
                "cached_prompt_tokens": server.served.engine.stats().prefix_cache_hit_tokens - hits_before,
            }
    finally:
        channel.close()
        server.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--out", type=Path, default=Path("bench-results/prefix_cache.json"))
    args = parser.parse_args()
    model_dir = resolve_model(DEFAULT_MODEL).directory
    arms = {"cache_off": measure(model_dir, False, args), "cache_on": measure(model_dir, True, args)}
    header = f"{'workload':<22} {'arm':<10} {'TTFT mean ms':>13} {'p50':>8} {'p90':>8} {'out tok/s':>10} " \
             f"{'cached/prompt tokens':>22}"
    print(header)
    for workload in arms["cache_off"]:
        for arm, results in arms.items():
            r = results[workload]
            print(f"{workload:<22} {arm:<10} {r['ttft_mean_ms']:>13.0f} {r['ttft_p50_ms']:>8.0f} "
                  f"{r['ttft_p90_ms']:>8.0f} {r['output_tok_s']:>10.1f} "
                  f"{r['cached_prompt_tokens']:>10}/{r['prompt_tokens']:<11}")
        off, on = arms["cache_off"][workload], arms["cache_on"][workload]
        print(f"{'':<22} {'on/off':<10} {on['ttft_mean_ms'] / off['ttft_mean_ms']:>13.2f} {'':>8} {'':>8} "
              f"{on['output_tok_s'] / off['output_tok_s']:>10.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "prefix_cache", "date": date.today().isoformat(),
                                    "machine": platform.machine(), "args": vars(args) | {"out": str(args.out)},
                                    "arms": arms}, indent=2))


if __name__ == "__main__":
    main()
