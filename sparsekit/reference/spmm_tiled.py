"""Reference SpMM of a :class:`~sparsekit.formats.TiledCSL` weight: ``C = A @ B`` in half precision.

The executable specification of ``sparsekit/gpu/spmm_tiled.py``. ``A`` (``M x K``, float16 or bfloat16, any
sparsity pattern) times a dense ``B`` (``K x N``, same dtype): products and sums in float32, as the
tensor cores accumulate them, one rounding to the dtype at the end.

>>> import numpy as np
>>> from sparsekit.formats import TiledCSL
>>> a = TiledCSL.from_dense(np.array([[1., 0., 2.], [0., 3., 0.]], dtype=np.float16), tile=(16, 16))
>>> spmm_tiled(a, np.ones((3, 2), dtype=np.float16))
array([[3., 3.],
       [3., 3.]], dtype=float16)
"""
from __future__ import annotations

import numpy as np

from sparsekit.checks import check_array

__all__ = ["spmm_tiled", "spmm_tiled_linear"]


def spmm_tiled(a, b: np.ndarray) -> np.ndarray:
    """``C = A @ b`` (``M x N``, C-contiguous, in ``b.dtype``) for a TiledCSL (or TiledBitmap) ``A`` and a dense ``b``."""
    _check(b, a, "b", rows=0)
    c = a.to_dense().astype(np.float32) @ b.astype(np.float32)
    return np.ascontiguousarray(c.astype(a.dtype))


def spmm_tiled_linear(a, x: np.ndarray) -> np.ndarray:
    """``Y = x @ A^T`` (``N x M``) for a TiledCSL (or TiledBitmap) weight ``A`` (``M x K``) and ``x`` (``N x K``): a linear layer."""
    _check(x, a, "x", rows=1)
    y = x.astype(np.float32) @ a.to_dense().astype(np.float32).T
    return np.ascontiguousarray(y.astype(a.dtype))


def _check(b, a, name: str, rows: int) -> None:
    """``b`` is 2-D, of ``a``'s dtype, with ``K`` along axis ``rows``."""
    check_array(b, name, ndim=2, dtypes=(a.dtype,))
    if b.shape[rows] != a.shape[1]:
        want = f"({a.shape[1]}, N)" if rows == 0 else f"(N, {a.shape[1]})"
        raise ValueError(f"{name}: expected shape {want} to multiply a {a.shape[0]}x{a.shape[1]} matrix, "
                         f"got {b.shape}")
