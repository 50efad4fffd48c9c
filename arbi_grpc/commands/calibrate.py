"""`arbi-serve calibrate`: run a model over calibration text and write its TKV calibration bundle.

The model runs through the engine's own decoder (`load_model`) in fp32. Its post-RoPE keys and values, minus
each window's first `--sink-tokens` positions, give the keys' per-channel shifts and scales (values are only
rotated; `calibrate_tkv`). With `--kv-bits K/V` every layer gets those bits. With `--avg-bits A` the bits are
allocated per layer around the operating point of A (3.5 -> K4V3) from each layer's keys and values measured
one width lower on the dev windows: of the uniform point, a greedy allocation and measured swaps (the most
sensitive slot up, the least sensitive down), the one with the least divergence from the exact-K/V model on the
dev windows is written. The default text is arbi_grpc/kv_codec/data/calibration_text.txt (original prose shipped
with the package, see docs/tkv.md).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

DEFAULT_TEXT = Path(__file__).resolve().parents[1] / "kv_codec" / "data" / "calibration_text.txt"
DEFAULT_AVG_BITS = 3.5


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "calibrate", help="calibrate the TKV KV-cache codec for a model and write its bundle",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", default=None, help="model name or path (default: embedded)")
    parser.add_argument("--calibration-text", type=Path, default=DEFAULT_TEXT,
                        help="UTF-8 text to calibrate on (default: the bundled calibration text)")
    bits = parser.add_mutually_exclusive_group()
    bits.add_argument("--avg-bits", type=float, default=None,
                      help=f"average code bits over K and V, allocated per layer (default {DEFAULT_AVG_BITS})")
    bits.add_argument("--kv-bits", default="", help="uniform bits for every layer: 4 or key/value as 4/3")
    parser.add_argument("--group-size", type=int, default=32, help="channels per fp16 scale/zero (16, 32, 64)")
    parser.add_argument("--sink-tokens", type=int, default=1, help="leading tokens per sequence kept in fp16")
    parser.add_argument("--window", type=int, default=512, help="tokens per calibration window")
    parser.add_argument("--max-windows", type=int, default=16, help="most calibration windows to use")
    parser.add_argument("--dev-windows", type=int, default=2,
                        help="windows (the last ones of the text) that score the per-layer allocation")
    parser.add_argument("--device", default="cpu", help="torch device to run the model on (cpu, cuda)")
    parser.add_argument("--output", type=Path, required=True, help="bundle directory to write")
    parser.set_defaults(handler=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    from arbi_grpc.config import parse_kv_bits
    from arbi_grpc.kv_codec.calibration.run import CalibrationSettings, run_calibration
    from arbi_grpc.models.model_cache import DEFAULT_MODEL, resolve_model

    started = time.monotonic()
    resolved = resolve_model(args.model or DEFAULT_MODEL)
    uniform_bits = parse_kv_bits(args.kv_bits)
    settings = CalibrationSettings(
        average_bits=None if uniform_bits else (args.avg_bits or DEFAULT_AVG_BITS),
        uniform_bits=uniform_bits,
        group_size=args.group_size,
        sink_tokens=args.sink_tokens,
        window=args.window,
        max_windows=args.max_windows,
        dev_windows=args.dev_windows,
    )
    report = run_calibration(resolved.directory, args.calibration_text, settings, args.output, args.device)
    print(json.dumps({"model": resolved.name, **report, "seconds": round(time.monotonic() - started, 1)}, indent=2))
    return 0
