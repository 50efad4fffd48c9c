"""GPU benchmark: arbi-serve against HF transformers `generate()` and the memory-bandwidth floor, side by side
in one run on the same random-weight bf16 models, prompts and lengths.

Per model shape it measures, for each batch size B (B requests of `--prompt-len` random tokens, `--new-tokens`
greedy tokens each, EOS ignored):
- arbi-serve's engine (Triton attention, CUDA graphs; driven in-process without a server): output tokens/s
  over the whole run (prefill included, as HF's number is) and the decode-only rate (tokens after the first),
  with overlapped steps ("arbi-serve") and, with `--overlap-modes on,off`, the synchronous loop too
  ("arbi-serve-sync", same engine and graphs); `--attention-backends triton,flashinfer` adds the same rows on
  the FlashInfer backend ("arbi-serve-flashinfer", no CUDA graphs);
- HF `generate()` with a static cache (which transformers compiles), its fastest configuration; at large
  batches its eager dynamic cache too when asked;
- the floor: one decode step must read every weight and the batch's KV context once, at the copy bandwidth
  measured in the same run.
It also measures the time to first token of one `--ttft-prompt-len`-token prompt. Prints a table and writes
JSON. Run on a GPU machine: `python -m benchmarks.gpu_decode --out build/gpu_decode.json`.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel

from arbi_grpc.attention.selection import build_kv_cache, select_attention_backend
from arbi_grpc.config import EngineConfig, parse_kv_bits
from arbi_grpc.engine.cuda_graphs import DecodeBatch
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.offline import generate
from arbi_grpc.engine.request import GenerationRequest
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration
from arbi_grpc.kv_codec.spec import TkvSpec
from arbi_grpc.memory.kv_pool import plan_kv_pool
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.decoder import CausalLM
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.models.reference_shapes import model_config_for_shape, reference_hf_config
from arbi_grpc.served_model import assemble_engine, build_runner
from arbi_grpc.text.tokenizer import SpecialTokenFacts, TextTokenizer


@dataclass(frozen=True)
class GraphStep:
    """GPU time of one replayed decode graph (forward + logits, no host work), against the floor."""

    shape: str
    batch: int
    context: int
    step_ms: float
    floor_ms: float


@dataclass(frozen=True)
class Row:
    shape: str
    system: str
    batch: int
    prompt_len: int
    new_tokens: int
    output_tokens_per_s: float
    decode_tokens_per_s: float | None  # tokens after each request's first, per second of decoding
    floor_tokens_per_s: float  # decode at the bandwidth floor


def synthetic_tokenizer(vocab_size: int) -> TextTokenizer:
    """A word-level tokenizer whose ids are `t0 .. t{V-1}`: lets the engine detokenize a random model's output."""
    backend = Tokenizer(WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    facts = SpecialTokenFacts(None, None, None, frozenset(), frozenset(), False, None)
    return TextTokenizer(backend, facts)


def copy_bandwidth(device: torch.device, num_bytes: int = 4 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s (read + write counted), best of 5."""
    source = torch.empty(num_bytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        target.copy_(source)
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    del source, target
    return 2 * num_bytes / best


def decode_floor_tokens_per_s(config: ModelConfig, weight_bytes: int, batch: int, context: int,
                              bandwidth: float) -> float:
    """Tokens/s if a decode step only read the weights and the batch's bf16 KV context once."""
    kv_bytes = 2 * config.num_layers * config.num_kv_heads * config.head_dim * 2 * context * batch
    return batch / ((weight_bytes + kv_bytes) / bandwidth)


def random_prompts(count: int, length: int, vocab_size: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (count, length), generator=generator).tolist()


def requests_for(prompts: list[list[int]], new_tokens: int, tag: str) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            request_id=f"{tag}-{index}",
            prompt_token_ids=tuple(prompt),
            sampling=SamplingParams(temperature=0.0),
            stopping=StoppingParams(max_output_tokens=new_tokens, ignore_eos=True),
        )
        for index, prompt in enumerate(prompts)
    ]


def bench_arbi(shape: str, config: ModelConfig, args: argparse.Namespace, bandwidth: float,
               attention_backend: str = "triton") -> tuple[list[Row], list[GraphStep], float]:
    """Rows for every batch size, graph replay times (none without graphs), and the TTFT of one long prompt (s)."""
    max_batch = max(args.batches)
    system = "arbi-serve" if attention_backend == "triton" else f"arbi-serve-{attention_backend}"
    engine_config = EngineConfig(
        device="cuda",
        attention_backend=attention_backend,
        kv_cache_memory_mib=args.kv_cache_mib,
        max_model_len=max(args.prompt_len + args.new_tokens, args.ttft_prompt_len + 1),
        max_running_requests=max_batch,
        max_step_tokens=max(args.ttft_prompt_len, max_batch),
        max_prefill_chunk_tokens=args.ttft_prompt_len,
        enable_prefix_cache=False,
        cuda_graph_max_batch=max_batch,
    )
    model = random_causal_lm(config, torch.bfloat16, "cuda", seed=0,
                             attention_backend=select_attention_backend(engine_config))
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    engine = start_engine(model, config, engine_config)
    try:
        generate(engine, requests_for(random_prompts(2, args.prompt_len, config.vocab_size, 1), 8, "warm"))
        rows = []
        for batch in args.batches:
            prompts = random_prompts(batch, args.prompt_len, config.vocab_size, seed=batch)
            for overlap in args.overlap_modes:
                engine.set_overlap_steps(overlap).result()
                started = time.monotonic()
                done = generate(engine, requests_for(prompts, args.new_tokens, f"b{batch}-{overlap}"))
                elapsed = time.monotonic() - started
                decode_span = max(r.finished_s for r in done) - max(r.first_token_s for r in done)
                rows.append(Row(
                    shape, system if overlap else f"{system}-sync", batch, args.prompt_len, args.new_tokens,
                    output_tokens_per_s=batch * args.new_tokens / elapsed,
                    decode_tokens_per_s=batch * (args.new_tokens - 1) / decode_span,
                    floor_tokens_per_s=decode_floor_tokens_per_s(
                        config, weight_bytes, batch, args.prompt_len + args.new_tokens // 2, bandwidth),
                ))
                print(rows[-1], flush=True)
        engine.set_overlap_steps(args.overlap_modes[0]).result()  # the TTFT below runs in the first mode
        graph_steps = [time_graph_step(shape, engine.runner, config, weight_bytes, batch, args.prompt_len, bandwidth)
                       for batch in args.batches if engine.runner.decode_graphs is not None]
        ttft_prompt = random_prompts(1, args.ttft_prompt_len, config.vocab_size, seed=7)
        generate(engine, requests_for(ttft_prompt, 1, "ttft-warm"))
        ttfts = [generate(engine, requests_for(ttft_prompt, 1, f"ttft{i}"))[0].time_to_first_token_s
                 for i in range(5)]
        return rows, graph_steps, min(ttfts)
    finally:
        engine.shutdown()
        del engine, model
        gc.collect()
        torch.cuda.empty_cache()


def start_engine(model: CausalLM, config: ModelConfig, engine_config: EngineConfig,
                 tkv_calibration: TkvCalibration | None = None) -> Engine:
    """An engine over `model` (its attention backend switched to the config's) with the config's KV pool."""
    backend = select_attention_backend(engine_config)
    for layer in model.model.layers:
        layer.self_attn.backend = backend
    pool = plan_kv_pool(engine_config, config, tkv_calibration)
    kv_cache = build_kv_cache(engine_config, config, pool.num_blocks, tkv_calibration)
    runner, _ = build_runner(model, kv_cache, engine_config, pool.max_model_len, backend)
    engine = assemble_engine(runner, config, synthetic_tokenizer(config.vocab_size), engine_config,
                             pool.max_model_len)
    engine.start()
    return engine


@dataclass(frozen=True)
class LongContextRow:
    """Decode at a long context with the bf16 cache or TKV, and the context the same KV memory holds."""

    shape: str
    kv_cache: str
    batch: int
    context: int
    new_tokens: int
    round: int  # fresh prompts each round; round 0 is the engine's first run at this context
    decode_tokens_per_s: float
    kv_capacity_tokens: int

    @property
    def fits(self) -> bool:
        """Whether the pool holds every sequence at once (else some wait, and the rate is not the batch's)."""
        return self.kv_capacity_tokens >= self.batch * (self.context + self.new_tokens)


def bench_long_context(shape: str, config: ModelConfig, args: argparse.Namespace) -> list[LongContextRow]:
    """bf16 cache vs TKV (uniform calibration, `--kv-bits`) at each of `--long-contexts`, same weights."""
    model = random_causal_lm(config, torch.bfloat16, "cuda", seed=0)
    calibration = TkvCalibration.uniform(
        "random-weights", TkvSpec(*parse_kv_bits(args.kv_bits)), config.num_layers, config.num_kv_heads,
        config.head_dim,
    )
    rows = []
    for kv_cache_dtype in ("bfloat16", "tkv"):
        tkv = kv_cache_dtype == "tkv"
        engine_config = EngineConfig(
            device="cuda", kv_cache_memory_mib=args.kv_cache_mib, kv_cache_dtype=kv_cache_dtype,
            kv_calibration="uniform (random weights)" if tkv else "", kv_bits=args.kv_bits if tkv else "",
            max_model_len=max(args.long_contexts) + args.long_new_tokens, max_running_requests=args.long_batch,
            max_step_tokens=8192, max_prefill_chunk_tokens=8192, enable_prefix_cache=False,
            cuda_graph_max_batch=args.long_batch,
        )
        capacity = plan_kv_pool(engine_config, config, calibration if tkv else None).capacity_tokens
        engine = start_engine(model, config, engine_config, calibration if tkv else None)
        try:
            label = f"tkv K{args.kv_bits}" if tkv else "bf16"
            for context in args.long_contexts:
                for round_index in range(args.long_rounds):
                    prompts = random_prompts(args.long_batch, context, config.vocab_size,
                                             seed=context * 1000 + round_index)
                    done = generate(engine, requests_for(prompts, args.long_new_tokens,
                                                         f"{kv_cache_dtype}{context}r{round_index}"))
                    decode_span = max(r.finished_s for r in done) - max(r.first_token_s for r in done)
                    rows.append(LongContextRow(shape, label, args.long_batch, context, args.long_new_tokens,
                                               round_index, args.long_batch * (args.long_new_tokens - 1) / decode_span,
                                               capacity))
                    print(rows[-1], flush=True)
        finally:
            engine.shutdown()
            del engine
            gc.collect()
            torch.cuda.empty_cache()
    return rows


def graph_step_block_tables(num_blocks: int, num_first_blocks: int, batch: int, blocks_per_seq: int
                            ) -> list[list[int]]:
    """Block tables of `batch` sequences of `blocks_per_seq` blocks as the block manager could hand them out: each
    first block among the first `num_first_blocks` ids (a TKV cache keeps sink rows for those alone: a first block
    past them reads and writes past its sink pool), the others spread over the rest of the pool (wrapping when the
    batch's blocks exceed it, as a timing allows)."""
    if not 0 < num_first_blocks <= num_blocks or batch < 0 or blocks_per_seq <= 0:
        raise ValueError(f"need 0 < num_first_blocks <= num_blocks and blocks_per_seq > 0, got {num_first_blocks}, "
                         f"{num_blocks}, {blocks_per_seq}")
    rest = num_blocks - num_first_blocks
    if rest == 0:  # every id may start a sequence (a bf16 cache): consecutive runs
        return [[(seq * blocks_per_seq + i) % num_blocks for i in range(blocks_per_seq)] for seq in range(batch)]
    return [[seq % num_first_blocks] + [num_first_blocks + (seq * (blocks_per_seq - 1) + i) % rest
                                        for i in range(blocks_per_seq - 1)] for seq in range(batch)]


def time_graph_step(shape: str, runner, config: ModelConfig, weight_bytes: int, batch: int, context: int,
                    bandwidth: float) -> GraphStep:
    """Median GPU time of replaying the decode graph of `batch` sequences at `context` tokens each."""
    decode = DecodeBatch(
        input_ids=[1] * batch, positions=[context - 1] * batch, slots=[-1] * batch, seq_lens=[context] * batch,
        block_tables=graph_step_block_tables(runner.kv_cache.num_blocks, runner.kv_cache.num_first_blocks, batch,
                                             -(-context // runner.block_size)),
        batch_slots=list(range(batch)),  # one each: batch <= max_running_requests, the batch slot count
    )
    times = []
    with torch.inference_mode():
        for _ in range(30):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            runner.decode_graphs.run(decode)
            start.record()
            runner.decode_graphs.run(decode)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    floor_ms = batch / decode_floor_tokens_per_s(config, weight_bytes, batch, context, bandwidth) * 1e3
    return GraphStep(shape, batch, context, sorted(times)[len(times) // 2], floor_ms)


def bench_hf(shape: str, config: ModelConfig, args: argparse.Namespace, bandwidth: float) -> list[Row]:
    from transformers import AutoConfig, AutoModelForCausalLM

    hf_config = AutoConfig.for_model(_model_type(shape), **reference_hf_config(shape))
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(hf_config, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    model.eval()
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    rows = []
    for batch in args.batches:
        for cache in args.hf_caches:
            prompts = torch.tensor(random_prompts(batch, args.prompt_len, config.vocab_size, seed=batch), device="cuda")
            kwargs = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
                          attention_mask=torch.ones_like(prompts), pad_token_id=0)
            if cache == "static":
                kwargs["cache_implementation"] = "static"
            try:
                for _ in range(2):  # the first run compiles (static cache)
                    model.generate(prompts, **kwargs)
                elapsed, output = _timed(model.generate, prompts, **kwargs)
                # Decode alone: the same call minus one that stops after the first token (the prefill).
                first_only = {**kwargs, "max_new_tokens": 1, "min_new_tokens": 1}
                model.generate(prompts, **first_only)
                prefill_elapsed, _ = _timed(model.generate, prompts, **first_only)
            except Exception as error:  # a configuration HF cannot run is reported, not fatal to the table
                print(f"HF {shape} batch {batch} {cache}: failed: {type(error).__name__}: {error}", flush=True)
                continue
            produced = output.shape[1] - args.prompt_len
            rows.append(Row(
                shape, f"hf-{cache}", batch, args.prompt_len, produced,
                output_tokens_per_s=batch * produced / elapsed,
                decode_tokens_per_s=batch * (produced - 1) / (elapsed - prefill_elapsed),
                floor_tokens_per_s=decode_floor_tokens_per_s(
                    config, weight_bytes, batch, args.prompt_len + args.new_tokens // 2, bandwidth),
            ))
            print(rows[-1], flush=True)
    del model
    gc.collect()
    torch.cuda.empty_cache()
    return rows


def _timed(call, *args, **kwargs):
    """(seconds, result) of call(*args, **kwargs), the GPU synchronised before and after."""
    torch.cuda.synchronize()
    started = time.monotonic()
    result = call(*args, **kwargs)
    torch.cuda.synchronize()
    return time.monotonic() - started, result


def _model_type(shape: str) -> str:
    architecture = reference_hf_config(shape)["architectures"][0]
    return {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}[architecture]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="llama3-8b,qwen3-0.6b")
    parser.add_argument("--batches", default="1,32,128", type=lambda text: [int(b) for b in text.split(",")])
    parser.add_argument("--prompt-len", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--ttft-prompt-len", type=int, default=2048)
    parser.add_argument("--kv-cache-mib", type=int, default=24576)
    parser.add_argument("--hf-caches", default="static", type=lambda text: [c for c in text.split(",") if c])
    parser.add_argument("--attention-backends", default="triton", type=lambda text: text.split(","),
                        help="attention backends of the arbi-serve rows: triton, flashinfer, or both")
    parser.add_argument("--overlap-modes", default="on,off",
                        type=lambda text: [{"on": True, "off": False}[m] for m in text.split(",") if m],
                        help="engine loops to time: on (overlapped steps), off (synchronous), or both")
    parser.add_argument("--long-contexts", default="", type=lambda text: [int(c) for c in text.split(",") if c],
                        help="contexts of the bf16-vs-TKV decode rows (e.g. 8192,32768); empty skips them")
    parser.add_argument("--long-shape", default="llama3.1-8b", help="model shape of the long-context rows")
    parser.add_argument("--long-batch", type=int, default=8)
    parser.add_argument("--long-new-tokens", type=int, default=64)
    parser.add_argument("--long-rounds", type=int, default=1, help="runs of each long context, fresh prompts each")
    parser.add_argument("--kv-bits", default="4", help="TKV bits of the long-context rows (uniform calibration)")
    parser.add_argument("--skip-short", action="store_true", help="only the long-context rows")
    parser.add_argument("--out", type=Path, default=Path("build/gpu_decode.json"))
    args = parser.parse_args()
    device = torch.device("cuda")
    bandwidth = copy_bandwidth(device)
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s", flush=True)
    rows: list[Row] = []
    graph_steps: list[GraphStep] = []
    ttft: dict[str, float] = {}
    long_rows = (bench_long_context(args.long_shape, model_config_for_shape(args.long_shape), args)
                 if args.long_contexts else [])
    for shape in [] if args.skip_short else args.shapes.split(","):
        config = model_config_for_shape(shape)
        for backend in args.attention_backends:
            label = shape if backend == "triton" else f"{shape} {backend}"
            arbi_rows, shape_graph_steps, ttft[label] = bench_arbi(shape, config, args, bandwidth, backend)
            graph_steps += shape_graph_steps
            rows += arbi_rows
            print(f"{label}: time to first token of {args.ttft_prompt_len} tokens: {ttft[label] * 1e3:.1f} ms",
                  flush=True)
        rows += bench_hf(shape, config, args, bandwidth) if args.hf_caches else []
    print(f"\n{'shape':<12} {'system':<26} {'batch':>5} {'out tok/s':>10} {'decode tok/s':>12} "
          f"{'step ms':>7} {'floor tok/s':>11} {'of floor':>8}")
    for row in rows:
        rate = row.decode_tokens_per_s or row.output_tokens_per_s
        decode = f"{row.decode_tokens_per_s:12.0f}" if row.decode_tokens_per_s else f"{'':>12}"
        step_ms = f"{row.batch / row.decode_tokens_per_s * 1e3:7.2f}" if row.decode_tokens_per_s else f"{'':>7}"
        print(f"{row.shape:<12} {row.system:<26} {row.batch:>5} {row.output_tokens_per_s:10.0f} {decode} "
              f"{step_ms} {row.floor_tokens_per_s:11.0f} {rate / row.floor_tokens_per_s:8.2f}")
    for step in graph_steps:
        print(f"{step.shape}: decode graph batch {step.batch} at {step.context} tokens: {step.step_ms:.2f} ms "
              f"(floor {step.floor_ms:.2f} ms, {step.floor_ms / step.step_ms:.2f} of floor)")
    for row in long_rows:
        fits = "" if row.fits else " (not all at once: some sequences waited)"
        print(f"{row.shape}: {row.kv_cache:<8} batch {row.batch} at {row.context} tokens, round {row.round}: decode "
              f"{row.decode_tokens_per_s:.0f} tok/s; the KV pool holds {row.kv_capacity_tokens:,} tokens{fits}")
    for shape, seconds in ttft.items():
        print(f"{shape}: TTFT {args.ttft_prompt_len}-token prompt {seconds * 1e3:.1f} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": " ".join(["python -m benchmarks.gpu_decode", *sys.argv[1:]]),
        "date": date.today().isoformat(), "machine": torch.cuda.get_device_name(device),
        "python": platform.python_version(), "torch": torch.__version__,
        "copy_bandwidth_bytes_per_s": bandwidth, "rows": [asdict(row) for row in rows],
        "graph_steps": [asdict(step) for step in graph_steps],
        "long_context": [asdict(row) | {"fits": row.fits} for row in long_rows],
        "ttft_s": ttft,
    }, indent=2))


if __name__ == "__main__":
    main()
