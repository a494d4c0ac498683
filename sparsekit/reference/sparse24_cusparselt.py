"""Our 2:4 packing in cuSPARSELt's compressed layout (NumPy reference; sm_90, cuSPARSELt 0.8).

cuSPARSELt keeps a 2:4 matrix in one buffer made by ``cusparseLtSpMMACompress``
(``torch._cslt_compress``): the packed values, then the metadata. Its layout
is not documented; this one was read off ``torch._cslt_compress`` on the lent
H100 (torch 2.11, cuSPARSELt 0.8.0; the buffers are in
``tests/data/cslt_h100_128x128.npz``): for an M x K fp16 matrix (M a multiple
of 64, K of 32)

* values: exactly our ``packed`` (M x K/2, row-major; same slot order and
  filler as :mod:`sparsekit.reference.sparsify24`);
* metadata: M*K/8 bytes right after, one nibble ``idx0 | idx1 << 2`` per row
  group of 4 (the same nibble as ours), low nibble of a byte first, in blocks
  of 16 rows x 32 columns (128 nibbles, 64 bytes). Inside a block the nibble
  of row ``8 h + l`` (``h`` in 0..1, ``l`` in 0..7) and group ``4 e + q``
  (``e`` in 0..1, ``q`` in 0..3) is number ``16 l + 4 q + 2 e + h``. Blocks go
  four 16-row blocks (a 64-row band) at a time, then along the columns, then
  to the next band: block ``(R, G)`` is number ``(R // 4) * 4 * (K/32) + 4 G + R % 4``.

The H100 buffers recorded are of full patterns (every row group keeps 2). A
group keeping one value has a filler slot; here it is ours (the reference
module's rule, value 0), which makes a valid buffer of the same matrix but
not necessarily the bytes ``_cslt_compress`` would choose for it.

PyTorch's own tile sparsifier (``_sparse_semi_structured_tile(...,
use_cutlass=False)``) writes a different metadata order on this machine (the
one reverse-engineered for cuSPARSELt on sm_80), so only the compress layout
is used here.

>>> import numpy as np
>>> from sparsekit.reference.sparsify24 import sparsify24
>>> s = sparsify24(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float16))
>>> to_cusparselt(s.packed, s.meta).shape
(64, 36)
"""
from __future__ import annotations

import numpy as np

from sparsekit.reference.sparsify24 import meta_offsets

__all__ = ["to_cusparselt", "nibble_sources", "CSLT_ALIGN"]

#: M and K must be multiples of this (64-row bands; the transposed buffer swaps M and K).
CSLT_ALIGN = 64


def nibble_sources(m: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """For each cuSPARSELt metadata nibble j (M*K/4 of them): the logical (row, group of 4) it holds."""
    j = np.arange(m * k // 4)
    b, o = j // 128, j % 128
    per_band = 4 * (k // 32)
    band, rem = b // per_band, b % per_band
    big_r, big_g = 4 * band + rem % 4, rem // 4
    row = 16 * big_r + 8 * (o & 1) + (o >> 4)
    group = 8 * big_g + 4 * ((o >> 1) & 1) + ((o >> 2) & 3)
    return row, group


def to_cusparselt(packed: np.ndarray, meta: np.ndarray) -> np.ndarray:
    """(M, K*9/16) buffer, ``packed``'s dtype: values then metadata bytes, as ``torch._cslt_compress`` lays out.

    ``packed`` (M, K/2) fp16 and ``meta`` (M, K/16) int16 in our (CUTLASS) layout,
    as :func:`sparsekit.reference.sparsify24.sparsify24` returns them; M and K multiples of 64.
    """
    m, k = packed.shape[0], 2 * packed.shape[1]
    if m % CSLT_ALIGN or k % CSLT_ALIGN:
        raise ValueError(f"packed: M and K must be multiples of {CSLT_ALIGN} for cuSPARSELt, got {m}x{k}")
    if packed.dtype != np.float16:
        raise TypeError(f"packed: cuSPARSELt buffers here are float16, got {packed.dtype}")
    logical = meta.reshape(-1).view(np.uint16)[meta_offsets(m, k)].astype(np.int64)     # (M, K/16)
    row, group = nibble_sources(m, k)
    nib = (logical[row, group // 4] >> (4 * (group % 4))) & 15
    meta_bytes = (nib[0::2] | nib[1::2] << 4).astype(np.uint8)
    out = np.concatenate([packed.reshape(-1).view(np.uint8), meta_bytes])
    return out.view(np.float16).reshape(m, k * 9 // 16)
