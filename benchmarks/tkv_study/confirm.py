"""Confirm TKV settings on the 12 test windows of the wikitext protocol (docs/tkv_study.md), on the CPU if need be.

Two kinds of rows:
- uniform bits, calibrated through the package API (`calibrate_tkv`, rotation, centering, "mse" scales) on
  the study's calibration windows (second half of the file), with the current encoder of quantize.py;
- bundles written by `arbi-serve calibrate` (any bits, any calibration text), loaded as the engine loads them.

Run from the repository root:
  python -m benchmarks.tkv_study.confirm --wikitext tests/data/wikitext-2/wiki.test.raw \\
      --token-cache build/tkv_study/wikitext_ids.pt --uniform 8/8 4/4 3/3 4/3 --bundle build/tkv_alloc35 \\
      --out benchmarks/tkv_study/results/confirm.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from arbi_grpc.kv_codec import TkvCalibration, calibrate_tkv
from arbi_grpc.kv_codec.calibration.bundle import METADATA_FILE
from benchmarks.tkv_study.allocation import sink_preserving_transform
from benchmarks.tkv_study.harness import WINDOW, StudyModel, default_gguf_path, split_windows, tokenize_wikitext


def load_ids(wikitext: Path, token_cache: Path | None, gguf_path: Path) -> torch.Tensor:
    if token_cache is not None and token_cache.exists():
        return torch.load(token_cache)
    ids = tokenize_wikitext(gguf_path, wikitext)
    if token_cache is not None:
        token_cache.parent.mkdir(parents=True, exist_ok=True)
        torch.save(ids, token_cache)
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wikitext", type=Path, required=True)
    parser.add_argument("--token-cache", type=Path, default=None)
    parser.add_argument("--gguf", type=Path, default=None)
    parser.add_argument("--test-windows", type=int, default=12)
    parser.add_argument("--calibration-windows", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=32)
    parser.add_argument("--sink-tokens", type=int, default=1)
    parser.add_argument("--uniform", nargs="*", default=[], help="key/value bits, e.g. 4/3")
    parser.add_argument("--bundle", nargs="*", type=Path, default=[], help="bundles from arbi-serve calibrate")
    parser.add_argument("--baseline", action="store_true", help="also score unquantized K/V")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    gguf_path = args.gguf or default_gguf_path()
    test, held_out = split_windows(load_ids(args.wikitext, args.token_cache, gguf_path))
    test = test[: args.test_windows]
    study = StudyModel.load(gguf_path, args.device)
    started = time.time()

    def record(payload: dict) -> None:
        line = json.dumps({**payload, "test_windows": test.shape[0], "elapsed_s": round(time.time() - started, 1)})
        with args.out.open("a") as results:
            results.write(line + "\n")
        print(line, flush=True)

    if args.baseline:
        record({"name": "baseline", "ppl": study.perplexity(test, None)})
    if args.uniform:
        keys, values, _ = study.collect_activations(held_out[: args.calibration_windows])
        sink = args.sink_tokens
        keys = [k.view(-1, WINDOW, *k.shape[1:])[:, sink:].reshape(-1, *k.shape[1:]) for k in keys]
        values = [v.view(-1, WINDOW, *v.shape[1:])[:, sink:].reshape(-1, *v.shape[1:]) for v in values]
        for text in args.uniform:
            key_bits, value_bits = (int(part) for part in text.split("/"))
            calibration = calibrate_tkv(
                keys, values, [(key_bits, value_bits)] * study.num_layers, args.group_size, "study",
                sink_tokens=sink,
            )
            record({"name": f"K{key_bits}V{value_bits}", "calibration": "wikitext second half",
                    "calibration_windows": args.calibration_windows,
                    "group_size": args.group_size, "sink_tokens": sink, "avg_bits": calibration.average_bits(),
                    "ppl": _perplexity(study, test, calibration)})
    for bundle in args.bundle:
        fingerprint = json.loads((bundle / METADATA_FILE).read_text())["model_fingerprint"]
        calibration = TkvCalibration.load(bundle, fingerprint)
        record({"name": f"bundle {bundle.name}", "group_size": calibration.group_size,
                "sink_tokens": calibration.sink_tokens, "avg_bits": calibration.average_bits(),
                "layer_bits": [list(pair) for pair in calibration.layer_bits],
                "ppl": _perplexity(study, test, calibration)})


def _perplexity(study: StudyModel, test: torch.Tensor, calibration: TkvCalibration) -> float:
    codecs = [calibration.layer_codec(layer) for layer in range(calibration.num_layers)]
    return study.perplexity(test, sink_preserving_transform(codecs, calibration.sink_tokens))


if __name__ == "__main__":
    main()
