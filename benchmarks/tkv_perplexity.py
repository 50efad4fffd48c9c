"""Benchmark: KV-cache quality through the engine's own paged path, fp32 KV vs TKV settings, the real SmolLM2 on
the CPU. Every K/V that attention reads went through the storage being measured.

- Perplexity, the FACTS.md protocol: wikitext-2's test file tokenized whole (no special tokens), its first 12
  consecutive 512-token windows each scored alone from the engine's prompt log-probabilities (511 losses per
  window), ppl = exp(mean loss).
  The change against fp32 comes with the standard error of the paired per-token loss difference: calibrations
  whose deltas differ by less than about two of those are not told apart by these 6,132 tokens. The mean and
  the largest absolute change of a token's loss against fp32 are printed and written too.
- Greedy agreement, 32 greedy tokens per prompt, on two prompt sets: `chat` (20 short chat prompts, about 40
  tokens with the template) and `long` (20 wikitext continuations: the 480 tokens before each of the 20 windows
  that follow the perplexity windows, so that most of the context is coded even with a wide exact window). The
  share of generations identical to those of the `--greedy-reference` setting (fp32 unless told). Where a
  generation departs from the reference's, the reference's own margin there (its top-1 minus top-2
  log-probability) says whether the departure was a near-tie, and whether the token taken was the reference's
  second choice.

Settings: `fp32` (float32 KV), `bf16` (bfloat16 KV), `KxVy` (TKV with --kv-bits x/y over the bundle's scales),
`bundle` (TKV with the bundle's own per-layer bits); a TKV setting may end in `-exactN` (`K4V4-exact1`: an
exact window of N blocks, --kv-exact-blocks N; the engine's default otherwise); `SETTING@DIR` takes another
bundle for that setting. Weights are float32 in every setting, so only the KV storage differs, unless
`--cpu-weights` names more than `float`: then every setting is measured with each of those CPU weight modes
(`--cpu-weights int8`: layer matrices in per-row int8), labelled `SETTING+MODE` (`fp32+int8`) except for float;
the perplexity change is still against the `fp32` setting with float weights.

    python -m benchmarks.tkv_perplexity --bundle DIR --settings fp32 K8V8 K4V4 K4V4-exact1 K3V3@DIR3 \\
        --greedy-settings K4V4 K4V4-exact1 --out bench-results/tkv_perplexity.json
    python -m benchmarks.tkv_perplexity --settings fp32 --cpu-weights float int8 --greedy-settings fp32+int8 \\
        --greedy-sets chat --out bench-results/int8_perplexity.json
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import re
import statistics
import time
from dataclasses import astuple, dataclass, replace
from pathlib import Path

from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.request import GenerationRequest, RequestOutput
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.models.model_cache import DEFAULT_MODEL
from arbi_grpc.served_model import ServedModel, build_served_model

WINDOW_TOKENS = 512
NUM_WINDOWS = 12
DEFAULT_WIKITEXT = Path(__file__).resolve().parents[1] / "tests" / "data" / "wikitext-2" / "wiki.test.raw"
GREEDY_TOKENS = 32
LONG_PROMPT_TOKENS = 480
GREEDY_SETS = ("chat", "long")
GREEDY_PROMPTS = (
    "What is the capital of France?", "Name three primary colors.", "How many legs does a spider have?",
    "Write a haiku about the sea.", "What is 12 times 7?", "Explain photosynthesis in one sentence.",
    "Who wrote Romeo and Juliet?", "Give me a synonym for happy.", "What does a CPU do?",
    "Translate 'good morning' into Spanish.", "Why is the sky blue?", "List two uses of copper.",
    "What is the boiling point of water in Celsius?", "Suggest a name for a pet cat.",
    "What is the largest planet in the solar system?", "Describe a rainbow to a child.",
    "What is the opposite of cold?", "How do bees make honey?", "Recommend a healthy breakfast.",
    "What language is spoken in Brazil?",
)
_TKV_SETTING = re.compile(r"(?:K([2-8])V([2-8])|bundle)(?:-exact([1-9][0-9]*))?")
PLAIN_KV_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


@dataclass(frozen=True)
class Setting:
    """One KV storage to measure: its label and the engine config fields that select it."""

    name: str
    kv_cache_dtype: str
    kv_bits: str = ""
    kv_calibration: str = ""
    kv_exact_blocks: int | None = None  # None: the engine's default
    cpu_weights: str = "float"

    @classmethod
    def parse(cls, text: str, default_bundle: Path | None) -> Setting:
        name, _, bundle = text.partition("@")
        if name in PLAIN_KV_DTYPES:
            return cls(text, PLAIN_KV_DTYPES[name])
        match = _TKV_SETTING.fullmatch(name)
        if match is None:
            raise SystemExit(f"setting {text!r}: expected fp32, bf16, bundle or KxVy (like K4V4), optionally "
                             "-exactN, optionally @DIR")
        bundle_dir = bundle or (str(default_bundle) if default_bundle else "")
        if not bundle_dir:
            raise SystemExit(f"setting {text!r} needs a calibration bundle: --bundle DIR or {name}@DIR")
        bits = f"{match[1]}/{match[2]}" if match[1] else ""
        return cls(text, "tkv", bits, bundle_dir, int(match[3]) if match[3] else None)

    def with_cpu_weights(self, mode: str) -> Setting:
        """This KV storage with the CPU weight mode `mode`, labelled `NAME+MODE` unless float."""
        return self if mode == "float" else replace(self, name=f"{self.name}+{mode}", cpu_weights=mode)

    def engine_config(self, model: str, device: str) -> EngineConfig:
        """fp32 weights (or the CPU weight mode's) on `device` (its default attention backend: torch on cpu,
        triton on cuda). Prompts are scored under `--kv-prefill-exact window`, so each query reads exactly what a
        decode step at its position would (the default `chunk` would read whole chunks exactly and flatter TKV)."""
        window = {} if self.kv_exact_blocks is None else {"kv_exact_blocks": self.kv_exact_blocks}
        return EngineConfig(model=model, device=device, dtype="float32", kv_cache_dtype=self.kv_cache_dtype,
                            kv_bits=self.kv_bits, kv_calibration=self.kv_calibration, enable_prefix_cache=False,
                            kv_cache_memory_mib=256, cpu_weights=self.cpu_weights, kv_prefill_exact="window",
                            **window)


def run_request(engine: Engine, request: GenerationRequest) -> list[RequestOutput]:
    """Submits `request` and waits for its last output; raises the request's error."""
    outputs: queue.SimpleQueue[RequestOutput] = queue.SimpleQueue()
    engine.submit(request, outputs.put)
    collected = []
    while True:
        output = outputs.get()
        if output.error is not None:
            raise output.error
        collected.append(output)
        if output.finish_reason is not None:
            return collected


def wikitext_windows(served: ServedModel, wikitext: Path, count: int = NUM_WINDOWS, first: int = 0) -> list[list[int]]:
    """`count` consecutive 512-token windows of the file tokenized whole (no special tokens), from window `first`."""
    ids = served.inputs.tokenizer.encode(wikitext.read_text(encoding="utf-8"), add_special_tokens=False)
    if len(ids) < (first + count) * WINDOW_TOKENS:
        raise SystemExit(f"{wikitext} has {len(ids)} tokens, fewer than {first + count} windows of {WINDOW_TOKENS}")
    return [ids[i * WINDOW_TOKENS : (i + 1) * WINDOW_TOKENS] for i in range(first, first + count)]


def window_losses(engine: Engine, window: list[int], request_id: str) -> list[float]:
    """The 511 next-token losses of one window, from the engine's prompt log-probabilities."""
    request = GenerationRequest(
        request_id=request_id,
        prompt_token_ids=tuple(window),
        sampling=SamplingParams(temperature=0.0, prompt_logprobs=True),
        stopping=StoppingParams(max_output_tokens=1, ignore_eos=True),
    )
    prompt_logprobs = run_request(engine, request)[0].prompt_logprobs
    if prompt_logprobs is None or len(prompt_logprobs) != len(window) or prompt_logprobs[0] is not None:
        raise RuntimeError(f"{request_id}: expected {len(window)} prompt logprobs, the first None")
    return [-logprob for logprob in prompt_logprobs[1:]]


def token_losses(engine: Engine, windows: list[list[int]]) -> list[float]:
    """The next-token losses of every window, window after window."""
    return [loss for i, window in enumerate(windows) for loss in window_losses(engine, window, f"window-{i}")]


def paired_delta(losses: list[float], reference: list[float]) -> tuple[float, float]:
    """(relative perplexity change, its standard error) of `losses` against `reference` on the same tokens."""
    differences = [a - b for a, b in zip(losses, reference, strict=True)]
    mean = statistics.fmean(differences)
    error = statistics.stdev(differences) / math.sqrt(len(differences))
    return math.exp(mean) - 1, math.exp(mean) * error


def token_changes(losses: list[float], reference: list[float]) -> dict[str, float]:
    """The mean and the largest absolute change of a token's loss against `reference` on the same tokens."""
    changes = [abs(a - b) for a, b in zip(losses, reference, strict=True)]
    return {"mean_abs": statistics.fmean(changes), "max_abs": max(changes)}


@dataclass(frozen=True)
class GreedyToken:
    """A greedy token, the runner-up and the log-probability margin between them."""

    token_id: int
    runner_up: int
    margin: float


def greedy_prompts(served: ServedModel, prompt_set: str, wikitext: Path) -> list[tuple[int, ...]]:
    """The token ids of one greedy prompt set (see the module docstring)."""
    if prompt_set == "chat":
        template = served.inputs.chat_template
        return [tuple(template.encode([{"role": "user", "content": prompt}])) for prompt in GREEDY_PROMPTS]
    windows = wikitext_windows(served, wikitext, len(GREEDY_PROMPTS), first=NUM_WINDOWS)
    return [tuple(window[:LONG_PROMPT_TOKENS]) for window in windows]


def greedy_generations(served: ServedModel, prompts: list[tuple[int, ...]]) -> list[list[GreedyToken]]:
    """GREEDY_TOKENS greedy tokens (EOS ignored) for each prompt, with their runners-up."""
    generations = []
    for index, prompt in enumerate(prompts):
        request = GenerationRequest(
            request_id=f"greedy-{index}",
            prompt_token_ids=prompt,
            sampling=SamplingParams(temperature=0.0, logprobs_count=2),
            stopping=StoppingParams(max_output_tokens=GREEDY_TOKENS, ignore_eos=True),
        )
        tokens = [t for out in run_request(served.engine, request) for t in out.tokens]
        generations.append([
            GreedyToken(t.token_id, t.top_logprobs[1][0], t.top_logprobs[0][1] - t.top_logprobs[1][1]) for t in tokens
        ])
    return generations


def departures(generations: list[list[GreedyToken]], reference: list[list[GreedyToken]]) -> list[tuple[float, bool]]:
    """For each generation that leaves the reference's: the reference's margin at the first differing token, and
    whether the token taken there was the reference's runner-up."""
    found = []
    for tokens, expected in zip(generations, reference, strict=True):
        ids, expected_ids = tuple(t.token_id for t in tokens), tuple(t.token_id for t in expected)
        first = _common_prefix(ids, expected_ids)
        if first < min(len(ids), len(expected_ids)):
            found.append((expected[first].margin, ids[first] == expected[first].runner_up))
    return found


def measure(setting: Setting, model: str, device: str, wikitext: Path, num_windows: int,
            greedy_sets: tuple[str, ...]) -> dict:
    started = time.perf_counter()
    served = build_served_model(setting.engine_config(model, device))
    try:
        row = {
            "setting": setting.name,
            "cpu_weights": setting.cpu_weights,
            "kv_codec": (served.engine.runner.kv_cache.setting_name if setting.kv_cache_dtype == "tkv"
                         else setting.kv_cache_dtype),
            "kv_block_bytes": served.engine.runner.kv_cache.bytes_per_block,
        }
        losses = token_losses(served.engine, wikitext_windows(served, wikitext, num_windows)) if num_windows else None
        row["ppl"] = math.exp(statistics.fmean(losses)) if losses else None
        row["losses"] = losses
        row["greedy"] = {
            prompt_set: [[astuple(t) for t in tokens]
                         for tokens in greedy_generations(served, greedy_prompts(served, prompt_set, wikitext))]
            for prompt_set in greedy_sets
        }
    finally:
        served.engine.shutdown()
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def _common_prefix(first: tuple[int, ...], second: tuple[int, ...]) -> int:
    """How many leading tokens two generations share."""
    return next((i for i, (a, b) in enumerate(zip(first, second)) if a != b), min(len(first), len(second)))


def agreement(row: dict, reference: dict, prompt_set: str) -> dict:
    """How `row`'s greedy generations of one prompt set compare with the reference's."""
    generations = [[GreedyToken(*t) for t in tokens] for tokens in row["greedy"][prompt_set]]
    expected = [[GreedyToken(*t) for t in tokens] for tokens in reference["greedy"][prompt_set]]
    ids = [tuple(t.token_id for t in tokens) for tokens in generations]
    expected_ids = [tuple(t.token_id for t in tokens) for tokens in expected]
    return {
        "identical": sum(a == b for a, b in zip(ids, expected_ids, strict=True)),
        "prompts": len(expected_ids),
        "mean_common_prefix_tokens": statistics.mean(_common_prefix(a, b) for a, b in zip(ids, expected_ids)),
        "departures": departures(generations, expected),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--device", default="cpu", help="cpu (torch backends) or cuda (Triton backends)")
    parser.add_argument("--wikitext", type=Path, default=DEFAULT_WIKITEXT)
    parser.add_argument("--bundle", type=Path, help="TKV calibration bundle for settings without @DIR")
    parser.add_argument("--settings", nargs="+", default=["fp32", "K8V8", "K4V4", "K3V3"])
    parser.add_argument("--greedy-settings", nargs="*", default=["K4V4"],
                        help="settings whose greedy generations are compared with the reference's")
    parser.add_argument("--greedy-reference", default="fp32", help="the setting greedy generations are compared with")
    parser.add_argument("--greedy-sets", nargs="+", choices=GREEDY_SETS, default=list(GREEDY_SETS),
                        help="greedy prompt sets (see above)")
    parser.add_argument("--windows", type=int, default=NUM_WINDOWS, help="wikitext windows to score (0: none)")
    parser.add_argument("--cpu-weights", nargs="+", default=["float"], choices=("float", "int4", "int8"),
                        help="CPU weight modes each setting is measured with (see above)")
    parser.add_argument("--out", type=Path, default=Path("bench-results/tkv_perplexity.json"))
    args = parser.parse_args()
    settings = [Setting.parse(text, args.bundle).with_cpu_weights(mode) for text in args.settings
                for mode in args.cpu_weights]
    greedy_names = set(args.greedy_settings) | ({args.greedy_reference} if args.greedy_settings else set())
    greedy_sets = tuple(args.greedy_sets)
    rows = [measure(s, args.model, args.device, args.wikitext, args.windows,
                    greedy_sets if s.name in greedy_names else ()) for s in settings]
    reference = next((row for row in rows if row["setting"] == "fp32"), None)
    greedy_reference = next((row for row in rows if row["setting"] == args.greedy_reference), None)
    set_columns = "".join(f" greedy = {args.greedy_reference} ({name}) | tokens before divergence ({name}) |"
                          for name in greedy_sets)
    print(f"| setting | KV storage | bytes/block | ppl | vs fp32 |{set_columns}\n"
          f"|---|---|---|---|---|{'---|---|' * len(greedy_sets)}")
    for row in rows:
        ppl, delta = "", ""
        if row["ppl"] is not None:
            ppl = f"{row['ppl']:.3f}"
            if reference is not None and reference["ppl"] is not None:
                change, error = paired_delta(row["losses"], reference["losses"])
                row["change_vs_fp32"], row["change_standard_error"] = change, error
                row["token_loss_changes"] = token_changes(row["losses"], reference["losses"])
                delta = f"{100 * change:+.2f}% ± {100 * error:.2f}"
        cells = ""
        for prompt_set in greedy_sets:
            if greedy_reference is None or prompt_set not in row["greedy"]:
                cells += "  |  |"
                continue
            found = row.setdefault("greedy_agreement", {})[prompt_set] = agreement(row, greedy_reference, prompt_set)
            cells += (f" {found['identical']}/{found['prompts']} | {found['mean_common_prefix_tokens']:.1f} of "
                      f"{GREEDY_TOKENS} |")
        print(f"| {row['setting']} | {row['kv_codec']} | {row['kv_block_bytes']:,} | {ppl} | {delta} |{cells}")
    for row in rows:
        for prompt_set, found in row.get("greedy_agreement", {}).items():
            if found["departures"]:
                margins = sorted(margin for margin, _ in found["departures"])
                runner_up = sum(took for _, took in found["departures"])
                print(f"{row['setting']} ({prompt_set}): {len(margins)} departures from {args.greedy_reference}, where "
                      f"its own margin was {statistics.median(margins):.3f} nats at the median and {margins[-1]:.3f} "
                      f"at most; {runner_up} took its runner-up")
    for row in rows:
        if row.get("token_loss_changes") and row is not reference:
            found = row["token_loss_changes"]
            print(f"{row['setting']}: each token's loss moved {found['mean_abs']:.3f} nats from fp32's on average, "
                  f"{found['max_abs']:.3f} at most")
        del row["losses"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"windows": args.windows, "window_tokens": WINDOW_TOKENS,
                                    "greedy_reference": args.greedy_reference, "rows": rows},
                                   indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
