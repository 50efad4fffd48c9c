"""The bounds of the TKV format that the kernels and the engine share, defined once: the bit widths a code can
have and the size of a tail slot's exact window. Plain Python (no torch or triton import), so the engine's config
and the gateway read them on any host."""

SUPPORTED_BITS: tuple[int, ...] = (2, 3, 4, 5, 6, 8)
"""Bit widths the packer stores densely and the kernels unpack (7 is left out: no kernel plans to read it)."""

MAX_EXACT_WINDOW_TOKENS = 256
"""Most positions of a tail slot's exact window (exact_blocks * block_size): the tail store copies it as one
tile."""
