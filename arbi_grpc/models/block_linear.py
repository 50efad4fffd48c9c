"""The CPU kernel of block-quantized weights (`quantized_weights.QuantizedWeight`, GGUF's Q4_0 / Q4_1 / Q8_0 as
stored): y = x @ w.T in float32 from the codes, scales and minimums themselves.

The scales and minimums are held as float16, GGUF's own precision (exactly the stored float32 values).
`csrc/block_linear.cpp` holds the kernel, a torch operator library built on first use with the machine's C++
compiler (`$CXX`, else `c++`) against the installed torch, and cached under `$ARBI_CACHE_DIR/kernels` (else
`~/.cache/arbi-serve/kernels`), one file per source, torch version and flags (`build_kernels`; about 15 s).
Up to `SMALL_BATCH` rows it reads the codes directly (a matrix-vector kernel: AVX2 + FMA where the CPU has them),
each row's arithmetic independent of the others, so a row's output does not depend on the batch; above, the
weight is dequantized into a float32 scratch matrix and multiplied by torch's float32 matmul (a GEMM reuses each
weight across rows, which the matrix-vector kernel does not). Both equal the float32 product with
`QuantizedWeight.dequantize()` up to float32 accumulation order.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arbi_grpc.models.model_cache import cache_base
from arbi_grpc.models.quantized_weights import QuantizedWeight

SMALL_BATCH = 16  # rows up to which the matrix-vector kernel runs (benchmarks/cpu_weight_kernels.py)
_SOURCE = Path(__file__).with_name("csrc") / "block_linear.cpp"
_FLAGS = ("-O3", "-std=c++17", "-shared", "-fPIC", "-ffp-contract=off", "-Wno-c++20-extensions")


class BlockLinear(nn.Module):
    """y = x @ w.T (+ bias) for a block-quantized w [N, K]; x [T, K] of any float dtype, y in x's dtype."""

    def __init__(self, weight: QuantizedWeight, bias: Tensor | None) -> None:
        super().__init__()
        self.kind = weight.kind
        self.out_features = weight.shape[0]
        self.register_buffer("codes", weight.codes)
        self.register_buffer("scale", _float16(weight.scale, "scale"))
        self.register_buffer("minimum", None if weight.minimum is None else _float16(weight.minimum, "minimum"))
        self.register_buffer("bias", bias)
        self.kernels = build_kernels()

    def dequantize(self) -> Tensor:
        """w [N, K] float32, equal to `QuantizedWeight.dequantize()`."""
        if self.kind == "q4":
            return self.kernels.q4_dequantize(self.codes, self.scale, self.minimum)
        return self.kernels.q8_dequantize(self.codes, self.scale)

    def rows(self, indices: Tensor) -> Tensor:
        """w[indices] [T, K] float32: an embedding lookup in the quantized table, equal to the dequantized one's."""
        codes, scale = self.codes.index_select(0, indices), self.scale.index_select(0, indices)
        if self.kind == "q4":
            return self.kernels.q4_dequantize(codes, scale, self.minimum.index_select(0, indices))
        return self.kernels.q8_dequantize(codes, scale)

    def forward(self, states: Tensor) -> Tensor:
        inputs = states.to(torch.float32).contiguous()
        if inputs.shape[0] > SMALL_BATCH:
            out = F.linear(inputs, self.dequantize())
        elif self.kind == "q4":
            out = self.kernels.q4_linear(inputs, self.codes, self.scale, self.minimum, True)
        else:
            out = self.kernels.q8_linear(inputs, self.codes, self.scale, True)
        out = out.to(states.dtype)
        return out if self.bias is None else out.add_(self.bias)


def _float16(values: Tensor, name: str) -> Tensor:
    """`values` as float16, which holds them exactly (GGUF stores a block's d and m so)."""
    held = values.to(torch.float16)
    if not torch.equal(held.float(), values):
        raise ValueError(f"BlockLinear: a block {name} is not a float16 value (GGUF's blocks hold float16 ones)")
    return held


class BlockEmbedding(nn.Module):
    """The token embedding read from a block-quantized table (a `BlockLinear`, shared with the output projection
    when the two are tied): ids [T] -> [T, K] float32, the dequantized table's rows."""

    def __init__(self, table: BlockLinear) -> None:
        super().__init__()
        self.table = table

    def forward(self, input_ids: Tensor) -> Tensor:
        return self.table.rows(input_ids)


@functools.cache
def build_kernels():
    """`torch.ops.arbi_block_linear`, compiling the library first when the cache lacks it."""
    torch_dir = Path(torch.__file__).parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    compiler = os.environ.get("CXX", "c++")
    source = _SOURCE.read_bytes()
    key = hashlib.sha256(b"\0".join([source, torch.__version__.encode(), compiler.encode(), *map(str.encode, _FLAGS),
                                     str(abi).encode()])).hexdigest()[:16]
    library = cache_base() / "kernels" / f"block_linear-{key}.so"
    if not library.is_file():
        library.parent.mkdir(parents=True, exist_ok=True)
        partial = library.with_suffix(f".{os.getpid()}.tmp")
        command = [
            compiler, *_FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
            f"-I{torch_dir / 'include'}", f"-I{torch_dir / 'include' / 'torch' / 'csrc' / 'api' / 'include'}",
            str(_SOURCE), "-o", str(partial),
            f"-L{torch_dir / 'lib'}", "-ltorch_cpu", "-lc10", f"-Wl,-rpath,{torch_dir / 'lib'}",
        ]
        try:
            built = subprocess.run(command, capture_output=True, text=True)
        except OSError as error:
            raise RuntimeError(f"the CPU block-quantized kernel needs a C++ compiler ({compiler!r}: {error}); "
                               "install one (g++) or set $CXX") from error
        if built.returncode != 0:
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"building {_SOURCE.name} failed ({' '.join(command)}):\n{built.stderr[-4000:]}")
        os.replace(partial, library)  # atomic: concurrent builders each install a whole file
    torch.ops.load_library(str(library))
    return torch.ops.arbi_block_linear
