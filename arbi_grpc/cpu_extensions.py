"""The CPU kernels written in C++ (`csrc/*.cpp` beside the modules that call them): each file is a torch operator
library, compiled on first use with the machine's C++ compiler (`$CXX`, else `c++`) against the installed torch, cached under
`$ARBI_CACHE_DIR/kernels` (else `~/.cache/arbi-serve/kernels`) as one file per source, torch version, compiler and
flags, and loaded into torch.ops: `NAME.cpp` defines TORCH_LIBRARY(arbi_NAME, ...).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

_FLAGS = ("-O3", "-std=c++17", "-shared", "-fPIC", "-fopenmp", "-ffp-contract=off", "-Wno-c++20-extensions")


def compiler_found() -> bool:
    """Whether the compiler the builds use (`$CXX`, else `c++`) is on the PATH (or is a path that exists)."""
    return shutil.which(os.environ.get("CXX", "c++")) is not None


@functools.cache
def load_cpu_extension(source_path: Path):
    """`torch.ops.arbi_<name>`, the library of the C++ file `<name>.cpp`, building it first when the cache lacks it. Raises RuntimeError naming the compiler when there is none or the build fails."""
    import torch  # here: `compiler_found` serves callers that load neither torch (`plan`) nor the model cache

    from arbi_grpc.models.model_cache import cache_base

    name = source_path.stem
    torch_dir = Path(torch.__file__).parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    compiler = os.environ.get("CXX", "c++")
    source = source_path.read_bytes()
    key = hashlib.sha256(b"\0".join([source, torch.__version__.encode(), compiler.encode(), *map(str.encode, _FLAGS),
                                     str(abi).encode()])).hexdigest()[:16]
    library = cache_base() / "kernels" / f"{name}-{key}.so"
    if not library.is_file():
        library.parent.mkdir(parents=True, exist_ok=True)
        partial = library.with_suffix(f".{os.getpid()}.tmp")
        command = [
            compiler, *_FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
            f"-I{torch_dir / 'include'}", f"-I{torch_dir / 'include' / 'torch' / 'csrc' / 'api' / 'include'}",
            str(source_path), "-o", str(partial),
            f"-L{torch_dir / 'lib'}", "-ltorch_cpu", "-lc10", f"-Wl,-rpath,{torch_dir / 'lib'}",
        ]
        try:
            built = subprocess.run(command, capture_output=True, text=True)
        except OSError as error:
            raise RuntimeError(f"the CPU kernels of {source_path.name} need a C++ compiler ({compiler!r}: {error}); "
                               "install one (g++) or set $CXX") from error
        if built.returncode != 0:
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"building {source_path.name} failed ({' '.join(command)}):\n{built.stderr[-4000:]}")
        os.replace(partial, library)  # atomic: concurrent builders each install a whole file
    torch.ops.load_library(str(library))
    return getattr(torch.ops, f"arbi_{name}")
