"""Compiles the TKV attention kernels for sm_90 (Hopper) on a machine without a GPU, through Triton's own compiler
and its bundled ptxas: the interpreter that runs the kernel tests on the CPU never compiles a kernel, and a kernel
can be right there and still fail Triton's sm_90 passes (a TKV prefill variant did, on the H200, 2026-12-02).

Each wrapper is called on CPU tensors with `JITFunction.run` replaced by a recorder, so the launches compiled are
exactly the ones the wrapper makes (arguments, constexprs, launch options), specialized as Triton's launcher would.
That specialization goes through Triton internals (`create_function_from_signature`, `JITFunction._pack_args`,
as in Triton 3.6 to 3.9), so a Triton upgrade may need this module to follow. Run with TRITON_INTERPRET unset:

    python -m tests.kernels.sm90_compile        # one line per compiled launch; exit 1 on the first failure
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.compiler import compile as triton_compile
from triton.runtime.jit import JITFunction, create_function_from_signature

from arbi_kernels import tkv_paged_decode_attention, tkv_paged_prefill_attention
from tests.kernels.tkv_batches import TkvShape, random_tkv_batch

SM90 = GPUTarget("cuda", 90, 64)
WIDTHS = ((4, 4), (3, 2))  # the default and the narrowest packed widths the engine serves


@contextmanager
def recorded_launches() -> Iterator[list[tuple[JITFunction, tuple, dict]]]:
    """While active, a kernel launch records (kernel, args, kwargs) instead of running."""
    launches: list[tuple[JITFunction, tuple, dict]] = []
    original = JITFunction.run

    def record(self, *args, grid, warmup, **kwargs):
        launches.append((self, args, kwargs))

    JITFunction.run = record
    try:
        yield launches
    finally:
        JITFunction.run = original


def compile_for_sm90(kernel: JITFunction, args: tuple, kwargs: dict):
    """The compiled kernel of one recorded launch, as Triton's launcher would specialize it."""
    backend = make_backend(SM90)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, options)
    return triton_compile(ASTSource(kernel, signature, constexprs, attrs), target=SM90, options=options.__dict__)


def tkv_launches(generator: torch.Generator) -> list[tuple[str, Callable[[], object]]]:
    """(label, call) for the TKV prefill kernel under both rules and the decode kernel, at each of WIDTHS, on
    Llama-3-8B's head layout (GQA 4, head_dim 128, pages of 16, 4 exact blocks, one sink)."""
    calls = []
    for key_bits, value_bits in WIDTHS:
        shape = TkvShape(32, 8, 128, 16, key_bits, value_bits, 32, 1, exact_blocks=4)
        prefill = random_tkv_batch(shape, [64, 64], [64, 160], "cpu", generator)
        decode = random_tkv_batch(shape, [1, 1], [40, 200], "cpu", generator)
        for chunk_exact in (True, False):
            calls.append((f"prefill K{key_bits}V{value_bits} chunk_exact={chunk_exact}",
                          lambda b=prefill, c=chunk_exact: tkv_paged_prefill_attention(
                              b.query, b.layer, b.block_tables, b.query_start_loc, b.seq_lens, b.tail_slots,
                              b.key_exact, b.value_exact, b.softmax_scale, max_query_len=64, chunk_exact=c)))
        calls.append((f"decode K{key_bits}V{value_bits}",
                      lambda b=decode: tkv_paged_decode_attention(
                          b.query, b.layer, b.block_tables, b.seq_lens, b.tail_slots, b.key_exact, b.value_exact,
                          b.softmax_scale, max_seq_len=200)))
    return calls


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("TRITON_INTERPRET=1 runs kernels in the interpreter: unset it to compile them", file=sys.stderr)
        return 2
    for label, call in tkv_launches(torch.Generator().manual_seed(0)):
        with recorded_launches() as launches:
            call()
        for kernel, args, kwargs in launches:
            started = time.perf_counter()
            compiled = compile_for_sm90(kernel, args, kwargs)
            print(f"{label}: {kernel.__name__} compiled for sm_90 in {time.perf_counter() - started:.1f} s "
                  f"({len(compiled.asm['cubin'])} bytes of cubin)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
