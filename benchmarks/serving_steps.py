"""Where a served step's time goes, bf16 against TKV, in-process at the Llama-3-8B shape (random bf16 weights).

Per KV cache (TKV: uniform K4V4, the default exact window; bf16), one engine sized as `benchmarks.serving` boots
`serve` for 64 x (2,048 + 512) (8 GiB of KV cache, max_model_len 2,560, running limit 91 / 64 as auto chose there,
8,192-token steps, 2,048-token prefill chunks, prefix cache on):
 A. that load in-process, all 64 requests at once: every step's device forward time (StepTimings events), its
    tokens and rows, so the run splits into mixed (prefill) steps and pure decode steps, and the host's launch
    cadence;
 B. the decode graph of 32 / 64 / 88 (TKV) or 24 / 32 / 64 (bf16) sequences at 2,300 tokens each
    (benchmarks.gpu_decode.time_graph_step);
 C. torch.profiler over 5 replays of the 64-sequence graph and 5 eager steps: device time per kernel name (kernels
    launched with programmatic dependent launch start before their predecessor ends, so their times overlap and
    sum to more than the step).
Run on a GPU: `python -m benchmarks.serving_steps [--cases tkv,bfloat16] [--no-load] [--out DIR]`; writes
steps.txt and steps.json to DIR.
"""
import argparse
import gc
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch

from arbi_grpc.config import EngineConfig, parse_kv_bits
from arbi_grpc.engine.cuda_graphs import DecodeBatch
from arbi_grpc.engine.offline import generate
from arbi_grpc.engine.step_timings import StepTimings
from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration
from arbi_grpc.kv_codec.spec import TkvSpec
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.models.reference_shapes import model_config_for_shape
from benchmarks.gpu_decode import (copy_bandwidth, graph_step_block_tables, random_prompts, requests_for,
                                   start_engine, time_graph_step)

log = None


def say(*parts):
    text = " ".join(str(p) for p in parts)
    print(text, flush=True)
    log.write(text + "\n")
    log.flush()


def kernel_table(prof, steps):
    by_name = defaultdict(lambda: [0.0, 0])
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            by_name[event.name][0] += event.time_range.elapsed_us() / 1e3
            by_name[event.name][1] += 1
    total = sum(v[0] for v in by_name.values())
    rows = sorted(by_name.items(), key=lambda kv: -kv[1][0])
    say(f"   device total {total / steps:.3f} ms per step over {steps} steps")
    for name, (ms, count) in rows[:28]:
        say(f"   {ms / steps:8.3f} ms/step {count / steps:7.1f} launches/step  {name[:110]}")
    return {name: [ms / steps, count / steps] for name, (ms, count) in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description="where a served step's time goes, bf16 against TKV")
    parser.add_argument("--cases", default="tkv,bfloat16")
    parser.add_argument("--no-load", action="store_true", help="skip the in-process load (A)")
    parser.add_argument("--out", type=Path, default=Path("build/serving_steps"))
    cli = parser.parse_args()
    cli.out.mkdir(parents=True, exist_ok=True)
    LOAD, CASES = not cli.no_load, cli.cases.split(",")
    BATCH, CONTEXT = 64, 2300
    results = {}
    global log
    log = open(cli.out / "steps.txt", "w")
    shape = "llama3-8b"
    config = model_config_for_shape(shape)
    bandwidth = copy_bandwidth(torch.device("cuda"))
    say(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s; {torch.cuda.get_device_name()} torch {torch.__version__}")
    model = random_causal_lm(config, torch.bfloat16, "cuda", seed=0)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    calibration = TkvCalibration.uniform("random-weights", TkvSpec(*parse_kv_bits("4")), config.num_layers,
                                         config.num_kv_heads, config.head_dim)
    for case in CASES:
        tkv = case == "tkv"
        running = 91 if tkv else 64
        engine_config = EngineConfig(
            device="cuda", kv_cache_memory_mib=8192, kv_cache_dtype=case,
            kv_calibration="uniform (random weights)" if tkv else "", kv_bits="4" if tkv else "",
            max_model_len=2560, max_running_requests=running, max_step_tokens=8192, max_prefill_chunk_tokens=2048,
            enable_prefix_cache=True, cuda_graph_max_batch=running,
        )
        t0 = time.monotonic()
        engine = start_engine(model, config, engine_config, calibration if tkv else None)
        say(f"\n=== {case}: engine up in {time.monotonic() - t0:.1f}s, blocks {engine.runner.kv_cache.num_blocks}, "
            f"first blocks {engine.runner.kv_cache.num_first_blocks}")
        entry = results.setdefault(case, {})
        runner = engine.runner
        try:
            generate(engine, requests_for(random_prompts(4, 256, config.vocab_size, 1), 8, "warm"))
            if LOAD:
                launches = []
                original = runner.launch

                def launch(step, previous, _original=original):
                    started = time.perf_counter()
                    launched = _original(step, previous)
                    launches.append((started, time.perf_counter() - started, step.num_tokens, len(step.chunks)))
                    return launched

                runner.launch = launch
                runner.timings = StepTimings()
                prompts = random_prompts(64, 2048, config.vocab_size, seed=11 if tkv else 12)
                started = time.monotonic()
                done = generate(engine, requests_for(prompts, 512, f"{case}-load"))
                elapsed = time.monotonic() - started
                runner.launch = original
                steps = runner.timings.take()
                runner.timings = None
                dev = [(s.num_tokens, s.rows, *s.device_ms()) for s in steps]
                ttft = sorted(r.first_token_s - r.submitted_s for r in done)
                tpot = sorted((r.finished_s - r.first_token_s) / (len(r.token_ids) - 1) * 1e3 for r in done)
                decode = [d for d in dev if d[0] == d[1]]
                mixed = [d for d in dev if d[0] != d[1]]
                last_first = max(r.first_token_s for r in done)
                by_rows = defaultdict(list)
                for d in decode:
                    by_rows[d[1]].append(d[2])
                # Host launch cadence: time between consecutive launches (the engine loop's period).
                gaps = [b[0] - a[0] for a, b in zip(launches, launches[1:])]
                say(f" load: {64 * 512 / elapsed:.0f} output tok/s in {elapsed:.2f}s; TTFT p50 {ttft[32]:.2f}s "
                    f"p99 {ttft[-1]:.2f}s; TPOT p50 {tpot[32]:.1f} ms; last first token at "
                    f"{last_first - started:.2f}s; decode phase after it {max(r.finished_s for r in done) - last_first:.2f}s")
                say(f" steps: {len(dev)} ({len(decode)} decode-only, {len(mixed)} mixed); forward ms summed: decode "
                    f"{sum(d[2] for d in decode) / 1e3:.2f}s, mixed {sum(d[2] for d in mixed) / 1e3:.2f}s; sampling "
                    f"{sum(d[4] for d in dev) / 1e3:.2f}s; waits {sum(d[3] for d in dev) / 1e3:.2f}s")
                for rows_, times in sorted(by_rows.items()):
                    if len(times) >= 3:
                        say(f"   decode rows {rows_:3d}: {len(times):4d} steps, forward p50 {statistics.median(times):.2f} ms,"
                            f" min {min(times):.2f}")
                mixed_tokens = defaultdict(list)
                for d in mixed:
                    mixed_tokens[(d[0] // 1024) * 1024].append(d[2])
                for bucket, times in sorted(mixed_tokens.items()):
                    say(f"   mixed ~{bucket}+ tokens: {len(times)} steps, forward p50 {statistics.median(times):.1f} ms")
                say(f" host: launch() p50 {statistics.median(l[1] for l in launches) * 1e3:.2f} ms, loop period p50 "
                    f"{statistics.median(gaps) * 1e3:.2f} ms; decode-only launch() p50 "
                    f"{statistics.median(l[1] for l in launches if l[2] == l[3]) * 1e3:.2f} ms")
                entry["load"] = dict(tok_s=64 * 512 / elapsed, elapsed=elapsed, ttft_p50=ttft[32], tpot_p50=tpot[32],
                                     steps=dev, launches=[(l[0] - launches[0][0], l[1], l[2], l[3]) for l in launches])
            # B: graph step at 64 x 2300
            kv = runner.kv_cache
            gs = time_graph_step(shape, runner, config, weight_bytes, BATCH, CONTEXT, bandwidth)
            say(f" graph step {BATCH} x {CONTEXT}: {gs.step_ms:.3f} ms (floor {gs.floor_ms:.3f})")
            entry["graph_step_ms"] = gs.step_ms
            for b in (32, 64, 88) if tkv else (24, 32, 64):
                if b <= runner.decode_graphs.max_batch:
                    g = time_graph_step(shape, runner, config, weight_bytes, b, CONTEXT, bandwidth)
                    say(f"   graph step {b} x {CONTEXT}: {g.step_ms:.3f} ms")
                    entry[f"graph_step_{b}"] = g.step_ms
            # C: profiler over graph replays, then eager steps
            decode = DecodeBatch(input_ids=[1] * BATCH, positions=[CONTEXT - 1] * BATCH, slots=[-1] * BATCH,
                                 seq_lens=[CONTEXT] * BATCH,
                                 block_tables=graph_step_block_tables(kv.num_blocks, kv.num_first_blocks, BATCH,
                                                                      -(-CONTEXT // kv.block_size)),
                                 batch_slots=list(range(BATCH)))
            graphs = runner.decode_graphs
            from torch.profiler import ProfilerActivity, profile
            with torch.inference_mode():
                for _ in range(3):
                    graphs.run(decode)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(5):
                        graphs.run(decode)
                    torch.cuda.synchronize()
                say(" profile of 5 graph replays:")
                entry["graph_kernels"] = kernel_table(prof, 5)
                metadata = graphs._metadata(BATCH)
                for _ in range(2):
                    graphs._forward(BATCH, metadata)
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(5):
                    graphs._forward(BATCH, metadata)
                end.record()
                torch.cuda.synchronize()
                say(f" eager step {BATCH} x {CONTEXT}: {start.elapsed_time(end) / 5:.3f} ms (events)")
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(5):
                        graphs._forward(BATCH, metadata)
                    torch.cuda.synchronize()
                say(" profile of 5 eager steps:")
                entry["eager_kernels"] = kernel_table(prof, 5)
        finally:
            engine.shutdown()
            del engine, runner
            gc.collect()
            torch.cuda.empty_cache()
    json.dump(results, open(cli.out / "steps.json", "w"))
    say("done")


if __name__ == "__main__":
    main()
