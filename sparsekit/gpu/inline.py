"""``@inlined``: the decorator of the kernels' device functions.

Why not ``cuda.jit(device=True, inline=True)``: ``inline=True`` means ``inline="always"``, Numba-IR
inlining, which deep-copies the callee's IR into every call site before typing. For our large generated
kernels that was most of their compile time. ``forceinline=True`` marks the function ``alwaysinline`` for
NVVM instead, which inlines it after Numba's front end: the post-LTO PTX is the same but for the order of a
few instructions, and the front end takes a third to a
half of the time (2-core machine: the tensor-core USpMM's one-wave setting 16.5 -> 7.7 s, the persistent
RNN's four-part kernel 62 -> 19 s). Measured on the H100 (``experiments/results/uspmm.md``):
bit-identical results and the same times for every routed USpMM setting, old against new.
"""
from __future__ import annotations

from numba import config, cuda


def inlined(fn):
    """``fn`` as a device function that NVVM inlines into every caller (the CUDA simulator, which runs
    Python and has no ``forceinline`` option, gets a plain device function)."""
    if config.ENABLE_CUDASIM:
        return cuda.jit(device=True)(fn)
    return cuda.jit(device=True, forceinline=True)(fn)
