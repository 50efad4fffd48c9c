"""Study: finer TKV groups at (nearly) equal bytes through low-bit per-group metadata (docs/tkv_study.md, "Study: 8-bit
group metadata"). Fake quantization only: the storage format, kernels and engine are unchanged.

Today a group of G channels stores an fp16 step and an fp16 zero (32/G bits per channel). The coded format stores,
per head vector of D channels, one fp16 `step_unit` S and one fp16 `zero_unit` Z (the K-quant "super scale" pair,
32/D bits per channel), and per group an m-bit step code and an m-bit zero code (2m/G bits per channel), with
M = 2^m - 1:

    step = S * step_code / M   (step_code in [1, M])      zero = -Z * zero_code / M   (zero_code in [0, M])

S and Z are the largest step and the largest negative zero any group of the vector needs, rounded up to fp16.
Zeros are never positive: a group whose minimum is positive gets zero 0 (still representable, with a wider step).
Each group keeps, of five metadata candidates, the one of least squared error with its codes picked against the
*decoded* metadata (round, clamp), so the error is the stored format's true error:
- "covering": zero_code rounded so that zero <= the group minimum, then step_code rounded up so that the top code
  reaches the group maximum: every value representable, error at most half a decoded step (min/max encoding);
- the package encoder's fp16 (zero, step) (min/max + least-squares refits, `quantize_groups`) with each code
  rounded down or up (four candidates).
The channel transforms (rotation, keys "mse" + center, values rotation only, sink 1) are calibrated per group size
with the package's fp16 encoder (`ChannelTable`) and shared by the fp16 and the coded rows of that group size.

  python -m benchmarks.tkv_study.group_metadata --wikitext tests/data/wikitext-2/wiki.test.raw \\
      --token-cache build/tkv_study/wikitext_ids.pt --bits 4/4 3/3 4/3 \\
      --formats 32:fp16 16:fp16 16:8 16:6 16:4 8:8 8:6 8:4 8:3 --out benchmarks/tkv_study/results/group_metadata.json
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from arbi_grpc.commands.calibrate import DEFAULT_TEXT
from arbi_grpc.kv_codec import TkvLayerCodec
from arbi_grpc.kv_codec.calibration.channel_transforms import MAX_SEARCH_SAMPLES, ChannelTable, _subsample
from arbi_grpc.kv_codec.calibration.run import text_windows
from arbi_grpc.kv_codec.codec import ChannelTransform
from arbi_grpc.kv_codec.quantize import SMALLEST_STEP, _round_fp16, dequantize_groups, quantize_groups
from benchmarks.tkv_perplexity import paired_delta
from benchmarks.tkv_study.allocation import KIND_KEYS, KIND_VALUES, Activations, sink_preserving_transform
from benchmarks.tkv_study.confirm import load_ids
from benchmarks.tkv_study.harness import WINDOW, StudyModel, default_gguf_path, tokenize_wikitext

FP16_BITS = 16
SUPER_PAIR_BITS = 2 * FP16_BITS
REPORTED_HEAD_DIMS = (64, 128)
CALIBRATION_WINDOWS = 16
SINK_TOKENS = 1


@dataclass(frozen=True)
class GroupFormat:
    """Per-group metadata of one row: fp16 step and zero (metadata_bits None, today's format), or m-bit codes under
    one fp16 (step_unit, zero_unit) pair per head vector."""

    group_size: int
    metadata_bits: int | None

    @classmethod
    def parse(cls, text: str) -> GroupFormat:
        group, metadata = text.split(":")
        return cls(int(group), None if metadata == "fp16" else int(metadata))

    @property
    def label(self) -> str:
        metadata = "fp16" if self.metadata_bits is None else f"{self.metadata_bits}-bit + fp16 pair"
        return f"G{self.group_size} {metadata}"

    def metadata_bits_per_channel(self, head_dim: int) -> float:
        if self.metadata_bits is None:
            return 2 * FP16_BITS / self.group_size
        return 2 * self.metadata_bits / self.group_size + SUPER_PAIR_BITS / head_dim


@dataclass(frozen=True)
class CodedMetadataGroups:
    """One tensor [..., D] in the coded format: codes [..., D/G, G], step and zero codes [..., D/G], and the
    per-vector fp16 step_unit and zero_unit [...]."""

    codes: torch.Tensor
    step_codes: torch.Tensor
    zero_codes: torch.Tensor
    step_unit: torch.Tensor
    zero_unit: torch.Tensor
    metadata_bits: int

    def steps(self) -> torch.Tensor:
        return _coded_steps(self.step_codes, self.step_unit, self.metadata_bits)

    def zeros(self) -> torch.Tensor:
        return _coded_zeros(self.zero_codes, self.zero_unit, self.metadata_bits)

    def decode(self) -> torch.Tensor:
        values = self.zeros().unsqueeze(-1) + self.codes * self.steps().unsqueeze(-1)  # [..., D/G, G]
        return values.flatten(-2)


def _top(bits: int) -> int:
    return (1 << bits) - 1


def _coded_steps(step_codes: torch.Tensor, step_unit: torch.Tensor, metadata_bits: int) -> torch.Tensor:
    return step_unit.float().unsqueeze(-1) * step_codes / _top(metadata_bits)


def _coded_zeros(zero_codes: torch.Tensor, zero_unit: torch.Tensor, metadata_bits: int) -> torch.Tensor:
    return -zero_unit.float().unsqueeze(-1) * zero_codes / _top(metadata_bits)


def encode_coded_metadata(x: torch.Tensor, bits: int, group_size: int, metadata_bits: int) -> CodedMetadataGroups:
    """Encode x [..., D] with `bits`-bit codes and `metadata_bits`-bit group metadata (module docstring)."""
    top, metadata_top = _top(bits), _top(metadata_bits)
    groups = x.float().reshape(*x.shape[:-1], -1, group_size)  # [..., n, G]
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    fp16 = quantize_groups(x, bits, group_size)
    target_zero, target_step = fp16.zero.float(), fp16.scale.float()  # [..., n]
    smallest = torch.full_like(low[..., 0], SMALLEST_STEP)
    zero_unit = _round_fp16(torch.maximum(smallest, torch.maximum(-low, -target_zero).amax(dim=-1)), float("inf"))

    covering_zero = torch.ceil(low.neg().clamp_min(0) * metadata_top / zero_unit.float().unsqueeze(-1))
    covering_zero = covering_zero.clamp(0, metadata_top)
    missed = _coded_zeros(covering_zero, zero_unit, metadata_bits) > low  # fp32 rounding of the product
    covering_zero = torch.where(missed, covering_zero + 1, covering_zero).clamp(max=metadata_top)
    needed_step = (high - _coded_zeros(covering_zero, zero_unit, metadata_bits)) / top
    step_unit = _round_fp16(torch.maximum(smallest, torch.maximum(needed_step, target_step).amax(dim=-1)), float("inf"))

    covering_step = torch.ceil(needed_step * metadata_top / step_unit.float().unsqueeze(-1)).clamp(1, metadata_top)
    missed = _coded_steps(covering_step, step_unit, metadata_bits) < needed_step
    covering_step = torch.where(missed, covering_step + 1, covering_step).clamp(max=metadata_top)

    zero_position = (-target_zero * metadata_top / zero_unit.float().unsqueeze(-1)).clamp(0, metadata_top)
    step_position = (target_step * metadata_top / step_unit.float().unsqueeze(-1)).clamp(1, metadata_top)
    candidates = [(covering_zero, covering_step)] + [
        (zero_round(zero_position), step_round(step_position))
        for zero_round in (torch.floor, torch.ceil) for step_round in (torch.floor, torch.ceil)
    ]
    best: tuple[torch.Tensor, ...] | None = None
    for zero_codes, step_codes in candidates:
        zero = _coded_zeros(zero_codes, zero_unit, metadata_bits).unsqueeze(-1)
        step = _coded_steps(step_codes, step_unit, metadata_bits).unsqueeze(-1)
        codes = torch.round((groups - zero) / step).clamp_(0, top)
        error = (zero + codes * step - groups).pow(2).sum(dim=-1)  # [..., n]
        if best is None:
            best = (codes, step_codes, zero_codes, error)
            continue
        better = error < best[3]
        best = (
            torch.where(better.unsqueeze(-1), codes, best[0]), torch.where(better, step_codes, best[1]),
            torch.where(better, zero_codes, best[2]), torch.where(better, error, best[3]),
        )
    codes, step_codes, zero_codes, _ = best
    return CodedMetadataGroups(codes, step_codes, zero_codes, step_unit, zero_unit, metadata_bits)


@dataclass(frozen=True)
class CodedMetadataCodec:
    """A package layer codec (rotation, calibrated channel transforms, bits, group size) whose group metadata is
    stored in the coded format; it offers the fake_quantize_* pair that `sink_preserving_transform` calls."""

    codec: TkvLayerCodec
    metadata_bits: int

    def fake_quantize_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self._round_trip(keys, self.codec.keys, self.codec.spec.key_bits)

    def fake_quantize_values(self, values: torch.Tensor) -> torch.Tensor:
        return self._round_trip(values, self.codec.values, self.codec.spec.value_bits)

    def _round_trip(self, x: torch.Tensor, transform: ChannelTransform, bits: int) -> torch.Tensor:
        stored = transform.forward(self.codec.into_rotated_space(x.float()))  # [..., H, D]
        encoded = encode_coded_metadata(stored, bits, self.codec.spec.group_size, self.metadata_bits)
        return self.codec.out_of_rotated_space(transform.inverse(encoded.decode())).to(x.dtype)


FakeQuantizer = TkvLayerCodec | CodedMetadataCodec


def check_encoder_invariants(seed: int = 0) -> None:
    """Assertions on a random tensor with channels of very different ranges: codes in range, each group's error
    within the covering candidate's bound (half a step of a min/max encoding whose range and step are widened by
    two grid spacings of the zero and step units), 8-bit metadata within 15% of the fp16 encoder's squared error
    and 16-bit metadata within 1%."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(256, 3, 64, generator=generator) * torch.rand(1, 3, 64, generator=generator).mul(4).exp()
    x[:, :, 5] += 6.0  # an offset channel: some groups have a positive minimum
    for bits in (3, 4):
        for group_size in (8, 16, 32):
            fp16_error = (dequantize_groups(quantize_groups(x, bits, group_size)) - x).pow(2).mean().item()
            for metadata_bits in (4, 6, 8, 16):
                encoded = encode_coded_metadata(x, bits, group_size, metadata_bits)
                top = _top(metadata_bits)
                assert int(encoded.step_codes.min()) >= 1 and int(encoded.step_codes.max()) <= top
                assert int(encoded.zero_codes.min()) >= 0 and int(encoded.zero_codes.max()) <= top
                assert bool((encoded.codes >= 0).all()) and bool((encoded.codes <= _top(bits)).all())
                groups = x.reshape(*x.shape[:-1], -1, group_size)
                error = (encoded.decode().reshape(groups.shape) - groups).pow(2).sum(dim=-1)
                zero_spacing = encoded.zero_unit.float().unsqueeze(-1) / top
                step_spacing = encoded.step_unit.float().unsqueeze(-1) / top
                covered = groups.amax(dim=-1) - groups.amin(dim=-1).clamp_max(0) + 2 * zero_spacing
                bound = group_size * ((covered / _top(bits) + 2 * step_spacing) / 2).pow(2)
                assert bool((error <= bound * (1 + 1e-5)).all()), (bits, group_size, metadata_bits)
                relative = (encoded.decode() - x).pow(2).mean().item() / fp16_error
                if metadata_bits == 16:
                    assert relative < 1.01, (bits, group_size, relative)
                if metadata_bits == 8:
                    assert relative < 1.15, (bits, group_size, relative)


def calibration_activations(study: StudyModel, gguf_path: Path, text: Path) -> Activations:
    """Post-RoPE K/V of the first CALIBRATION_WINDOWS windows of `text`, as `arbi-serve calibrate` cuts them."""
    windows = text_windows(tokenize_wikitext(gguf_path, text).tolist(), WINDOW, CALIBRATION_WINDOWS)
    return Activations(*study.collect_activations(windows))


def layer_codecs(table: ChannelTable, key_bits: int, value_bits: int, num_layers: int) -> list[TkvLayerCodec]:
    calibration = table.calibration([(key_bits, value_bits)] * num_layers, "study", SINK_TOKENS)
    return [calibration.layer_codec(layer) for layer in range(num_layers)]


def round_trip_mse(
    codecs: list[FakeQuantizer], keys: list[torch.Tensor], values: list[torch.Tensor]
) -> tuple[float, float]:
    """Mean squared round-trip error of the calibration keys and values (model space, every layer, at most
    MAX_SEARCH_SAMPLES evenly spaced samples per layer)."""
    key_error = value_error = 0.0
    for codec, layer_keys, layer_values in zip(codecs, keys, values, strict=True):
        layer_keys = _subsample(layer_keys, MAX_SEARCH_SAMPLES)
        layer_values = _subsample(layer_values, MAX_SEARCH_SAMPLES)
        key_error += (codec.fake_quantize_keys(layer_keys) - layer_keys).pow(2).mean().item() / len(codecs)
        value_error += (codec.fake_quantize_values(layer_values) - layer_values).pow(2).mean().item() / len(codecs)
    return key_error, value_error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wikitext", type=Path, required=True)
    parser.add_argument("--token-cache", type=Path, default=None)
    parser.add_argument("--calibration-text", type=Path, default=DEFAULT_TEXT)
    parser.add_argument("--test-windows", type=int, default=12, help="the first N windows of 512 test tokens")
    parser.add_argument("--bits", nargs="+", default=["4/4", "3/3"], help="key/value bits, e.g. 4/3")
    parser.add_argument("--formats", nargs="+", default=["32:fp16", "16:fp16", "16:8"],
                        help="G:fp16 (today's metadata) or G:m (m-bit group metadata + one fp16 pair per vector)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True, help="JSON file; this run is added to its runs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    check_encoder_invariants()
    formats = [GroupFormat.parse(text) for text in args.formats]
    gguf_path = default_gguf_path()
    ids = load_ids(args.wikitext, args.token_cache, gguf_path)
    test = ids[: args.test_windows * WINDOW].view(args.test_windows, WINDOW)  # the FACTS windows, and more after them
    study = StudyModel.load(gguf_path, "cpu")
    started = time.time()
    activations = calibration_activations(study, gguf_path, args.calibration_text)
    keys = [activations.samples(KIND_KEYS, layer, SINK_TOKENS) for layer in range(study.num_layers)]
    values = [activations.samples(KIND_VALUES, layer, SINK_TOKENS) for layer in range(study.num_layers)]
    tables = {group: ChannelTable(keys, values, group) for group in sorted({f.group_size for f in formats})}
    baseline = study.window_losses(test, None).double().flatten().tolist()
    runs = json.loads(args.out.read_text())["runs"] if args.out.exists() else []
    report: dict = {
        "date": time.strftime("%Y-%m-%d"), "device": "cpu", "calibration_text": args.calibration_text.name, "calibration_windows": CALIBRATION_WINDOWS,
        "sink_tokens": SINK_TOKENS, "test_windows": test.shape[0], "recipe": "rotation, K mse+center, V rotation only",
        "baseline_ppl": _perplexity(baseline), "first_format": formats[0].label, "rows": [],
    }
    for bits_text in args.bits:
        key_bits, value_bits = (int(part) for part in bits_text.split("/"))
        reference: list[float] = []  # the first format's losses at these bits
        for group_format in formats:
            codecs: list[FakeQuantizer] = layer_codecs(tables[group_format.group_size], key_bits, value_bits,
                                                       study.num_layers)
            if group_format.metadata_bits is not None:
                codecs = [CodedMetadataCodec(codec, group_format.metadata_bits) for codec in codecs]
            key_mse, value_mse = round_trip_mse(codecs, keys, values)
            transform = sink_preserving_transform(codecs, SINK_TOKENS)
            losses = study.window_losses(test, transform).double().flatten().tolist()
            reference = reference or losses
            change, error = paired_delta(losses, baseline)
            change_vs_reference, error_vs_reference = paired_delta(losses, reference)
            code_bits = (key_bits + value_bits) / 2
            row = {
                "bits": f"K{key_bits}V{value_bits}", "format": group_format.label,
                "group_size": group_format.group_size, "metadata_bits": group_format.metadata_bits,
                **{f"bits_per_element_d{d}": code_bits + group_format.metadata_bits_per_channel(d)
                   for d in REPORTED_HEAD_DIMS},
                "calibration_key_mse": key_mse, "calibration_value_mse": value_mse,
                "ppl": _perplexity(losses), "delta_pct": 100 * change, "delta_se_pct": 100 * error,
                "delta_vs_first_format_pct": 100 * change_vs_reference,
                "delta_vs_first_format_se_pct": 100 * error_vs_reference,
                "elapsed_s": round(time.time() - started, 1),
            }
            report["rows"].append(row)
            print(json.dumps(row), flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"runs": [*runs, report]}, indent=1) + "\n")


def _perplexity(losses: list[float]) -> float:
    return float(torch.tensor(losses, dtype=torch.float64).mean().exp())


if __name__ == "__main__":
    main()
