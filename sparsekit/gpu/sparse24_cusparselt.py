"""Our 2:4 metadata rewritten in cuSPARSELt's compressed layout, on the GPU.

Computes the metadata part of :func:`sparsekit.reference.sparse24_cusparselt.to_cusparselt`
(the layout is described there): each thread assembles one 32-bit word, eight
nibbles gathered from our CUTLASS-layout metadata (``meta``, as
:func:`sparsekit.gpu.sparsify24.sparsify24` writes it). The values part of the buffer is
our ``packed`` unchanged, so the caller only concatenates.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from sparsekit.reference.sparse24_cusparselt import CSLT_ALIGN
from sparsekit.arrays import cdiv, operand, output, result
from sparsekit.checks import check_divisible

__all__ = ["cusparselt_meta", "THREADS"]

#: Threads per block (one output word each).
THREADS = 256


@cuda.jit
def _cslt_meta_kernel(meta16, out32, m, k):
    # arrays: meta16 (M*K/16,) uint16, our stored metadata; out32 (M*K/32,) uint32, cuSPARSELt's.
    # sizes: m, k.
    u = cuda.grid(1)
    if u < m * k // 32:
        per_band = 4 * (k // 32)
        word = 0
        for t in range(8):                  # nibble j = 8u + t of the cuSPARSELt metadata
            j = 8 * u + t
            b = j >> 7                       # 16x32 block number and nibble in it
            o = j & 127
            band = b // per_band
            rem = b - band * per_band
            r = 16 * (4 * band + (rem & 3)) + 8 * (o & 1) + (o >> 4)
            g = 8 * (rem >> 2) + 4 * ((o >> 1) & 1) + ((o >> 2) & 3)
            c = g >> 2                       # logical 16-bit word (r, c); our stored offset of it
            d = (r & ~31) | ((r & 7) << 2) | ((r >> 3) & 3)
            off = (c >> 1) * 2 * m + 2 * (d & ~1) + 2 * (c & 1) + (d & 1)
            word |= ((int(meta16[off]) >> (4 * (g & 3))) & 15) << (4 * t)
        out32[u] = word


def cusparselt_meta(meta, m: int, k: int):
    """(M*K/8,) uint8: cuSPARSELt's metadata bytes of a matrix whose metadata (ours) is ``meta``.

    ``meta``: (M, K/16) int16 in :mod:`sparsekit.reference.sparsify24`'s layout (NumPy, Numba or
    CAI, e.g. PyTorch); M and K multiples of 64. Returns the kind ``meta`` is.
    """
    check_divisible(m, CSLT_ALIGN, "m")
    check_divisible(k, CSLT_ALIGN, "k")
    op = operand(meta, "meta", dtypes=(np.dtype(np.int16),), ndim=2, shape=(m, k // 16))
    out = output((m * k // 8,), np.uint8, like=op)
    words = m * k // 32
    if words:
        _cslt_meta_kernel[cdiv(words, THREADS), THREADS](op.dev.reshape(-1).view(np.uint16), out.view(np.uint32),
                                                         m, k)
    return result(out, like=op)
