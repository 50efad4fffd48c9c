"""Stopgap calibration bundles for the TKV engine benchmark, until `arbi-serve calibrate` lands: post-RoPE K/V
recorded from the engine's own model (a wrapper around the torch attention backend) over calibration windows
taken from the second half of wikitext-2's test file (disjoint from the 12 scored windows), then
`calibrate_tkv` (mse scales, centered, per the study's defaults) and the bundle written with the model's
fingerprint.

    python -m arbi_grpc.benchmarks.tkv_calibration_bundle --kv-bits 4/4 --output build/tkv_bundles/k4v4
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from arbi_grpc.config import parse_kv_bits
from arbi_grpc.kv_codec import calibrate_tkv, model_dir_fingerprint
from arbi_grpc.models.attention_metadata import AttentionMetadata, token_positions
from arbi_grpc.models.kv_cache import PagedKVCache
from arbi_grpc.models.loader import load_model
from arbi_grpc.models.model_cache import DEFAULT_MODEL, resolve_model
from arbi_grpc.models.torch_paged_attention import TorchPagedAttention
from arbi_grpc.text.tokenizer import TextTokenizer

WINDOW_TOKENS = 512
DEFAULT_WIKITEXT = Path("../shared/data/wikitext-2/wiki.test.raw")


@dataclass(frozen=True)
class RecordingAttention(TorchPagedAttention):
    """The torch backend that also keeps every layer's keys and values at positions >= `skip_positions`."""

    skip_positions: int = 1
    keys: dict[int, list[Tensor]] = field(default_factory=dict, compare=False)
    values: dict[int, list[Tensor]] = field(default_factory=dict, compare=False)

    def forward(self, layer_index, query, key, value, metadata, kv_cache):  # noqa: D102 (the protocol's)
        positions = token_positions(metadata.query_lens_host, metadata.seq_lens_host, key.device)
        kept = positions >= self.skip_positions
        self.keys.setdefault(layer_index, []).append(key[kept].float().cpu())
        self.values.setdefault(layer_index, []).append(value[kept].float().cpu())
        return super().forward(layer_index, query, key, value, metadata, kv_cache)


def calibration_windows(tokenizer: TextTokenizer, wikitext: Path, count: int) -> list[list[int]]:
    """The first `count` windows of 512 tokens of the file's second half (no special tokens)."""
    ids = tokenizer.encode(wikitext.read_text(encoding="utf-8"), add_special_tokens=False)
    start = len(ids) // 2
    return [ids[start + i * WINDOW_TOKENS : start + (i + 1) * WINDOW_TOKENS] for i in range(count)]


@torch.inference_mode()
def record_kv(model_dir: Path, windows: list[list[int]], sink_tokens: int) -> tuple[list[Tensor], list[Tensor]]:
    """Per layer, post-RoPE keys and values [tokens, Hkv, D] of every window position >= sink_tokens."""
    backend = RecordingAttention(skip_positions=sink_tokens)
    model, config = load_model(model_dir, attention_backend=backend)
    block_size = 16
    num_blocks = WINDOW_TOKENS // block_size
    cache = PagedKVCache.for_model(config, num_blocks=num_blocks, block_size=block_size, dtype=torch.float32,
                                   device="cpu")
    for window in windows:
        metadata = AttentionMetadata.build(query_lens=[len(window)], seq_lens=[len(window)],
                                           block_tables=[list(range(num_blocks))], block_size=block_size)
        model(torch.tensor(window), token_positions([len(window)], [len(window)]), metadata, cache)
    layers = range(config.num_layers)
    return [torch.cat(backend.keys[i]) for i in layers], [torch.cat(backend.values[i]) for i in layers]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--wikitext", type=Path, default=DEFAULT_WIKITEXT)
    parser.add_argument("--windows", type=int, default=16, help="calibration windows of 512 tokens")
    parser.add_argument("--kv-bits", default="4/4", help="bits the scales are calibrated for: 4 or K/V like 4/3")
    parser.add_argument("--group-size", type=int, default=32)
    parser.add_argument("--sink-tokens", type=int, default=1)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    started = time.perf_counter()
    resolved = resolve_model(args.model)
    windows = calibration_windows(TextTokenizer.from_model_dir(resolved.directory), args.wikitext, args.windows)
    keys, values = record_kv(resolved.directory, windows, args.sink_tokens)
    calibration = calibrate_tkv(
        keys, values, [parse_kv_bits(args.kv_bits)] * len(keys), args.group_size,
        model_dir_fingerprint(resolved.directory), sink_tokens=args.sink_tokens,
    )
    calibration.save(args.output)
    print(f"wrote {args.output} ({calibration.method}, layer bits {calibration.layer_bits[0]}, "
          f"{time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
