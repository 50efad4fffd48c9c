"""Per-group encoder variants of the second TKV study, scored on the first test windows at one bit setting.

Variants (all keep the storage format: per-group fp16 scale/zero, the same codes):
- "minmax": the first study's encoder (quantize.py with REFIT_ROUNDS = 0);
- "clip": per group, every (low, high) range with each end pulled in by 0, 10, 20 or 30% of the half-range
  (16 candidates), keeping the one of least squared error over the group;
- "refit": the package encoder (min/max start, then REFIT_ROUNDS least-squares refits).
The channel transforms are calibrated once with "minmax" (rotation, centering, "mse" scales, sink 1) and
shared, so the rows differ only by the encoder applied when the cache is written.

  python -m benchmarks.tkv_study.encoder_variants --wikitext tests/data/wikitext-2/wiki.test.raw \\
      --token-cache build/tkv_study/wikitext_ids.pt --test-windows 4 --bits 3/3
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import torch

import arbi_grpc.kv_codec.calibration.channel_transforms as calibrate_module
import arbi_grpc.kv_codec.codec as codec_module
from arbi_grpc.kv_codec import quantize
from arbi_grpc.kv_codec.packing import pack_codes
from benchmarks.tkv_study.allocation import Activations, Recipe, ScaleTable
from benchmarks.tkv_study.confirm import load_ids
from benchmarks.tkv_study.harness import StudyModel, default_gguf_path, split_windows

CLIP_KEEP = (1.0, 0.9, 0.8, 0.7)
Encoder = Callable[[torch.Tensor, int, int], quantize.QuantizedGroups]


def min_max_encoder(x: torch.Tensor, bits: int, group_size: int) -> quantize.QuantizedGroups:
    saved, quantize.REFIT_ROUNDS = quantize.REFIT_ROUNDS, 0
    try:
        return quantize.quantize_groups(x, bits, group_size)
    finally:
        quantize.REFIT_ROUNDS = saved


def clipped_range_encoder(x: torch.Tensor, bits: int, group_size: int) -> quantize.QuantizedGroups:
    top_code = (1 << bits) - 1
    groups = x.float().reshape(*x.shape[:-1], x.shape[-1] // group_size, group_size)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    half = (high - low) / 2
    best: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    for keep_low in CLIP_KEEP:
        for keep_high in CLIP_KEEP:
            clipped_low = quantize._round_fp16(low + (1 - keep_low) * half, float("-inf")).float()
            clipped_high = high - (1 - keep_high) * half
            zero, scale = quantize._group_metadata(clipped_low, (clipped_high - clipped_low) / top_code)
            codes = quantize._group_codes(groups, zero, scale, top_code)
            error = quantize._squared_error(groups, codes, zero, scale)
            if best is None:
                best = (zero, scale, codes, error)
                continue
            better = error < best[3]
            best = (
                torch.where(better, zero, best[0]), torch.where(better, scale, best[1]),
                torch.where(better.unsqueeze(-1), codes, best[2]), torch.where(better, error, best[3]),
            )
    zero, scale, codes, _ = best
    return quantize.QuantizedGroups(pack_codes(codes.to(torch.uint8).reshape(x.shape), bits), scale, zero, bits,
                                    group_size)


ENCODERS: dict[str, Encoder] = {
    "minmax": min_max_encoder, "clip": clipped_range_encoder, "refit": quantize.quantize_groups,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wikitext", type=Path, required=True)
    parser.add_argument("--token-cache", type=Path, default=None)
    parser.add_argument("--test-windows", type=int, default=4)
    parser.add_argument("--bits", default="3/3")
    parser.add_argument("--group-size", type=int, default=32)
    args = parser.parse_args()
    gguf_path = default_gguf_path()
    test, held_out = split_windows(load_ids(args.wikitext, args.token_cache, gguf_path))
    test = test[: args.test_windows]
    study = StudyModel.load(gguf_path, "cpu")
    baseline = study.perplexity(test, None)
    calibrate_module.quantize_groups = min_max_encoder  # channel transforms calibrated with min/max
    table = ScaleTable(Activations(*study.collect_activations(held_out[:16])), Recipe(args.group_size, True, "mse",
                                                                                       center=True, sink_tokens=1))
    key_bits, value_bits = (int(part) for part in args.bits.split("/"))
    layer_bits = [(key_bits, value_bits)] * study.num_layers
    transform = table.transform(layer_bits)  # calibrates every layer now
    for name, encoder in ENCODERS.items():
        codec_module.quantize_groups = encoder
        ppl = study.perplexity(test, transform)
        print(json.dumps({"encoder": name, "bits": args.bits, "group_size": args.group_size,
                          "test_windows": test.shape[0], "ppl": ppl, "delta_pct": 100 * (ppl / baseline - 1)}))


if __name__ == "__main__":
    main()
