"""Benchmark: the engine's host-side time per decode step, with the model's own cost taken out.

A random tiny model (1 layer, hidden 64, vocabulary 512) on the CPU, or with `--device cuda` on a GPU with CUDA
graphs, serves `--batch` requests of `--prompt-len` random tokens, each generating `--new-tokens` tokens (greedy,
ignore_eos). The engine is driven step by step on this thread (no engine thread), so every step is timed and
profiled; the time inside the model's forward and logits is measured and subtracted, leaving scheduling, block
tables, input staging, sampling, output processing and the stats publish. Times are this thread's CPU time
(`time.thread_time`), so other processes on a shared machine matter less. It prints the mean host time per decode
step (every sequence running), then the functions with the most own time per decode step under cProfile.

    python -m benchmarks.engine_host_overhead --out build/engine_host_overhead.json
"""

from __future__ import annotations

import argparse
import cProfile
import json
import platform
import pstats
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel

import arbi_grpc
from arbi_grpc.attention.selection import build_kv_cache, select_attention_backend
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.request import GenerationRequest
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.memory.kv_pool import plan_kv_pool
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.served_model import assemble_engine, build_runner
from arbi_grpc.text.tokenizer import SpecialTokenFacts, TextTokenizer


class ModelClock:
    """Wraps a model's forward and compute_logits and sums the seconds spent in them."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.seconds = 0.0
        for name in ("forward", "compute_logits"):
            setattr(model, name, self._timed(getattr(model, name)))

    def _timed(self, function):
        def timed(*args, **kwargs):
            started = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.thread_time() - started
        return timed


def tiny_config(vocab_size: int) -> ModelConfig:
    return ModelConfig.from_hf_config({
        "architectures": ["LlamaForCausalLM"], "vocab_size": vocab_size, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 4096, "tie_word_embeddings": True,
        "bos_token_id": 1, "eos_token_id": 2,
    })


def word_tokenizer(vocab_size: int) -> TextTokenizer:
    backend = Tokenizer(WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    return TextTokenizer(backend, SpecialTokenFacts(None, None, None, frozenset(), frozenset(), False, None))


def build_engine(args: argparse.Namespace, config: ModelConfig) -> tuple[Engine, ModelClock]:
    engine_config = EngineConfig(
        device=args.device, kv_cache_memory_mib=args.kv_cache_mib, max_model_len=args.prompt_len + args.new_tokens,
        max_running_requests=args.batch, max_step_tokens=max(args.batch * args.prompt_len, args.batch),
        max_prefill_chunk_tokens=args.batch * args.prompt_len, enable_prefix_cache=args.prefix_cache,
    )
    backend = select_attention_backend(engine_config)
    dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    model = random_causal_lm(config, dtype, args.device, seed=0, attention_backend=backend)
    pool = plan_kv_pool(engine_config, config)
    kv_cache = build_kv_cache(engine_config, config, pool.num_blocks)
    runner, _ = build_runner(model, kv_cache, engine_config, pool.max_model_len, backend)
    clock = ModelClock(runner.model)
    return assemble_engine(runner, config, word_tokenizer(config.vocab_size), engine_config, pool.max_model_len), clock


def submit_all(engine: Engine, args: argparse.Namespace, vocab_size: int, tag: str) -> list[int]:
    """Submits the batch; returns the list every sink appends a finish to."""
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, vocab_size, (args.batch, args.prompt_len), generator=generator).tolist()
    finished: list[int] = []
    for index, prompt in enumerate(prompts):
        request = GenerationRequest(
            request_id=f"{tag}-{index}", prompt_token_ids=tuple(prompt), sampling=SamplingParams(temperature=0.0),
            stopping=StoppingParams(max_output_tokens=args.new_tokens, ignore_eos=True),
        )
        engine.submit(request, lambda output: finished.append(1) if output.finished else None)
    return finished


def run_batch(engine: Engine, clock: ModelClock, args: argparse.Namespace, vocab_size: int, tag: str,
              profiler: cProfile.Profile | None) -> list[float]:
    """Drives the engine until the batch finishes; the host seconds of each step with every sequence running."""
    finished = submit_all(engine, args, vocab_size, tag)
    engine._take_tasks(block=False)
    host_seconds = []
    while len(finished) < args.batch:
        decoding = len(engine.scheduler.running) == args.batch and not engine.scheduler.waiting
        model_before = clock.seconds
        if decoding and profiler is not None:
            profiler.enable()
        started = time.thread_time()
        engine._take_tasks(block=False)
        engine.step()
        elapsed = time.thread_time() - started
        if decoding and profiler is not None:
            profiler.disable()
        if decoding:
            host_seconds.append(elapsed - (clock.seconds - model_before))
    while engine.pipeline.has_step_in_flight:
        engine.step()
    return host_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu",
                        help="cuda: the same with CUDA graphs, where a step's time is almost all host work")
    parser.add_argument("--kv-cache-mib", type=int, default=64)
    parser.add_argument("--prefix-cache", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = tiny_config(512)
    engine, clock = build_engine(args, config)
    run_batch(engine, clock, args, config.vocab_size, "warm", None)
    rounds = [run_batch(engine, clock, args, config.vocab_size, f"r{i}", None) for i in range(args.rounds)]
    profiler = cProfile.Profile(time.thread_time)
    profiled = run_batch(engine, clock, args, config.vocab_size, "profiled", profiler)
    per_round_ms = [1e3 * sum(r) / len(r) for r in rounds]
    print(f"tree: {Path(arbi_grpc.__file__).parent.parent}")
    print(f"batch {args.batch}, prompt {args.prompt_len}, new tokens {args.new_tokens}: "
          f"{len(rounds[0])} decode steps a round")
    print("host ms per decode step, each round: " + ", ".join(f"{ms:.3f}" for ms in per_round_ms))
    print(f"best {min(per_round_ms):.3f} ms  ({1e3 * min(per_round_ms) / args.batch:.2f} us per sequence)")
    print(f"\ntop functions by own time per decode step (cProfile, {len(profiled)} steps):")
    stats = pstats.Stats(profiler)
    rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:args.top]
    print(f"{'own us':>9} {'cum us':>9} {'calls':>8}  function")
    for (file, line, name), (_, calls, own, cumulative, _) in rows:
        print(f"{1e6 * own / len(profiled):9.1f} {1e6 * cumulative / len(profiled):9.1f} "
              f"{calls / len(profiled):8.1f}  {Path(file).name}:{line} {name}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "machine": platform.processor() or platform.machine(), "device": args.device, "batch": args.batch,
            "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
            "host_ms_per_decode_step": per_round_ms,
        }, indent=2))


if __name__ == "__main__":
    main()
