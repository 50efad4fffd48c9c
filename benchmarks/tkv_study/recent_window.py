"""Study: how much of the TKV loss comes back if each query attends to its most recent keys and values exactly?

KIVI-style caches keep a window of the newest tokens in fp16 and quantize only older ones. This script
measures that lever before any engine work: attention for query position i uses exact K/V for positions j with
i - j < R (and the fp16 sink) and the codec's fake-quantized K/V for older positions. R = 0 is the codec as
served today, the sanity row. `--tail-blocks N` rows instead keep exact the query's own block of 16 tokens and
the N - 1 blocks before it: what a paged cache gets by quantizing a block only once the sequence has moved N
blocks past it. Bundles come from `arbi-serve calibrate` (the engine's protocol); `--kv-bits`
overrides their bits as `--kv-bits` does at boot.

    python -m benchmarks.tkv_study.recent_window --wikitext tests/data/wikitext-2/wiki.test.raw \\
        --token-cache build/tkv_study/wikitext_ids.pt --bundle build/tkv_b44 --kv-bits 4/4 3/3 \\
        --recent 0 16 64 --out benchmarks/tkv_study/results/recent_window.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv

from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration
from arbi_grpc.kv_codec.calibration.engine_bundle import with_kv_bits
from benchmarks.tkv_study import harness
from benchmarks.tkv_study.allocation import sink_preserving_transform
from benchmarks.tkv_study.confirm import load_ids
from benchmarks.tkv_study.harness import StudyModel, default_gguf_path, split_windows

RECENT_ATTENTION_NAME = "tkv_recent_window"
TAIL_BLOCK_SIZE = 16  # the engine's default KV block


def attention_with_exact_recent_window(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """Causal attention where keys/values closer than `module.recent_window` positions to the query are exact and
    older ones pass through `module.kv_transform`. query [B, Hq, T, D], key/value [B, Hkv, T, D]."""
    transform = module.kv_transform
    quantized_key, quantized_value = key, value
    if transform is not None:
        new_key, new_value = transform(module.layer_idx, key.transpose(1, 2), value.transpose(1, 2))
        quantized_key, quantized_value = new_key.transpose(1, 2), new_value.transpose(1, 2)
    groups = query.shape[1] // key.shape[1]
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    quantized_key, quantized_value = repeat_kv(quantized_key, groups), repeat_kv(quantized_value, groups)
    length = query.shape[2]
    positions = torch.arange(length, device=query.device)
    distance = positions[:, None] - positions[None, :]  # [T, T]: query position minus key position
    if module.tail_blocks:  # exact: the query's own block and the (tail_blocks - 1) blocks before it
        block_gap = positions[:, None] // TAIL_BLOCK_SIZE - positions[None, :] // TAIL_BLOCK_SIZE
        near = (distance >= 0) & (block_gap < module.tail_blocks)
    else:
        near = (distance >= 0) & (distance < module.recent_window)
    far = (distance >= 0) & ~near
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.where(near, query @ key.transpose(-1, -2), query @ quantized_key.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~(near | far), float("-inf"))
    probabilities = torch.softmax(scores.float(), dim=-1).to(query.dtype)
    output = (probabilities * near) @ value + (probabilities * far) @ quantized_value  # [B, Hq, T, D]
    return output.transpose(1, 2).contiguous(), None


def use_recent_window(study: StudyModel, recent: int, tail_blocks: int) -> None:
    AttentionInterface.register(RECENT_ATTENTION_NAME, attention_with_exact_recent_window)
    study.model.config._attn_implementation = RECENT_ATTENTION_NAME
    for layer in study.model.model.layers:
        layer.self_attn.recent_window = recent
        layer.self_attn.tail_blocks = tail_blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wikitext", type=Path, required=True)
    parser.add_argument("--token-cache", type=Path)
    parser.add_argument("--bundle", type=Path, required=True, help="a bundle written by `arbi-serve calibrate`")
    parser.add_argument("--kv-bits", nargs="+", default=["4/4"], help="bits to override the bundle's with")
    parser.add_argument("--recent", nargs="*", type=int, default=[0, 16, 64], help="exact recent positions R")
    parser.add_argument("--tail-blocks", nargs="*", type=int, default=[],
                        help="rows where the query's own block of 16 (and N - 1 blocks before it) is exact instead")
    parser.add_argument("--test-windows", type=int, default=harness.TEST_WINDOWS)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    gguf = default_gguf_path()
    study = StudyModel.load(gguf, "cpu")
    test = split_windows(load_ids(args.wikitext, args.token_cache, gguf))[0][: args.test_windows]
    baseline = study.window_losses(test, None).double()
    rows = []
    bundle_fingerprint = json.loads((args.bundle / "tkv_calibration.json").read_text())["model_fingerprint"]
    for bits in args.kv_bits:
        key_bits, value_bits = (int(b) for b in bits.split("/"))
        calibration = with_kv_bits(TkvCalibration.load(args.bundle, bundle_fingerprint), (key_bits, value_bits))
        codecs = [calibration.layer_codec(layer) for layer in range(calibration.num_layers)]
        transform = sink_preserving_transform(codecs, calibration.sink_tokens)
        windows = [(recent, 0) for recent in args.recent] + [(0, blocks) for blocks in args.tail_blocks]
        for recent, tail_blocks in windows:
            use_recent_window(study, recent, tail_blocks)
            started = time.monotonic()
            losses = study.window_losses(test, transform).double()
            difference = (losses - baseline).flatten()
            delta = math.exp(losses.mean().item() - baseline.mean().item()) - 1
            standard_error = difference.std().item() / math.sqrt(difference.numel()) * math.exp(losses.mean().item() - baseline.mean().item())
            rows.append({"kv_bits": bits, "recent": recent, "tail_blocks": tail_blocks, "ppl": math.exp(losses.mean().item()),
                         "baseline_ppl": math.exp(baseline.mean().item()), "delta_percent": 100 * delta,
                         "standard_error_percent": 100 * standard_error, "seconds": time.monotonic() - started})
            print(json.dumps(rows[-1]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "test_windows": len(test), "rows": rows},
                                   indent=2))


if __name__ == "__main__":
    main()
