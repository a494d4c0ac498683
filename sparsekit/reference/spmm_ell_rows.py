"""Reference of ``sparsekit/gpu/spmm_ell_rows.py``: a linear layer ``Y = X W^T`` whose weight ``W`` (``M x K``) is
stored as padded ELL rows, and the densified ``W``.

*Padded ELL rows* (the storage of :class:`sparsekit.torch.SparseLinear` for 16-bit weights): ``values``
and ``indices``, both ``M x W`` and row-major, ``W`` a multiple of 8; entry ``j`` of row ``r`` is the
value ``values[r, j]`` at column ``indices[r, j]`` (read as an unsigned 16-bit integer); the column ``K``
marks padding, whose value is ignored. Any pattern fits (rows of unequal length are padded to the longest);
uniform sparsity pads only to the next multiple of 8. Products and sums in float32, one rounding at the end.

>>> import numpy as np
>>> values = np.array([[1, 2, 0, 0, 0, 0, 0, 0], [3, 0, 0, 0, 0, 0, 0, 0]], dtype=np.float16)
>>> indices = np.array([[0, 2, 3, 3, 3, 3, 3, 3], [1, 3, 3, 3, 3, 3, 3, 3]], dtype=np.uint16)
>>> densify_ell_rows(values, indices, 3)
array([[1., 0., 2.],
       [0., 3., 0.]], dtype=float16)
>>> spmm_ell_rows_linear(values, indices, 3, np.ones((1, 3), dtype=np.float16))
array([[3., 3.]], dtype=float16)
"""
from __future__ import annotations

import numpy as np

from sparsekit.checks import HALF_DTYPES, check_array

__all__ = ["densify_ell_rows", "spmm_ell_rows_linear", "ell_rows_from_dense", "ell_rows_from_ell", "check_rows"]

#: Entries a row is padded to a multiple of (16 bytes of 16-bit values: one vector load).
ROW_MULTIPLE = 8
#: The widest ``K``: columns and the padding mark ``K`` are unsigned 16-bit.
MAX_COLUMNS = (1 << 16) - 1


def check_rows(values, indices, k: int) -> None:
    """The shapes, dtypes and width of padded ELL rows (index ranges are the caller's: see
    :func:`sparsekit.gpu.spmm_ell_rows.check_indices`)."""
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not 0 <= k <= MAX_COLUMNS:
        raise ValueError(f"k: columns must be an integer in 0..{MAX_COLUMNS}, got {k!r}")
    if tuple(values.shape) != tuple(indices.shape) or len(values.shape) != 2:
        raise ValueError(f"values, indices: must be 2-D of one shape, got {tuple(values.shape)} and "
                         f"{tuple(indices.shape)}")
    if values.shape[1] % ROW_MULTIPLE:
        raise ValueError(f"values: rows must be padded to a multiple of {ROW_MULTIPLE} entries, got "
                         f"{values.shape[1]}")


def ell_rows_from_dense(w: np.ndarray, width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The nonzeros of ``w`` (``M x K``) as padded ELL rows ``(values, indices)``: each row's entries in
    ascending column, padded to ``width`` (default: the longest row, rounded up to a multiple of 8)."""
    m, k = w.shape
    if k > MAX_COLUMNS:
        raise ValueError(f"w: at most {MAX_COLUMNS} columns, got {k}")
    kept = w != 0
    longest = int(kept.sum(axis=1).max()) if m else 0
    width = -(-max(longest, 1) // ROW_MULTIPLE) * ROW_MULTIPLE if width is None else width
    if width < longest or width % ROW_MULTIPLE:
        raise ValueError(f"width: a multiple of {ROW_MULTIPLE} of at least {longest}, got {width}")
    values = np.zeros((m, width), dtype=w.dtype)
    indices = np.full((m, width), k, dtype=np.uint16)
    for r in range(m):
        cols = np.flatnonzero(kept[r])
        values[r, :cols.size], indices[r, :cols.size] = w[r, cols], cols
    return values, indices


def ell_rows_from_ell(ell) -> tuple[np.ndarray, np.ndarray]:
    """An :class:`~sparsekit.formats.ELL`'s rows as padded ELL rows ``(values, indices)``: its ``K'`` entries
    a row in its own order, padded to a multiple of 8 with zeros at column ``K``."""
    m, k = ell.shape
    if k > MAX_COLUMNS:
        raise ValueError(f"ell: at most {MAX_COLUMNS} columns, got {k}")
    kprime = ell.values.shape[1]
    width = -(-max(kprime, 1) // ROW_MULTIPLE) * ROW_MULTIPLE
    values = np.zeros((m, width), dtype=ell.values.dtype)
    indices = np.full((m, width), k, dtype=np.uint16)
    values[:, :kprime], indices[:, :kprime] = ell.values, ell.indices
    return values, indices


def densify_ell_rows(values: np.ndarray, indices: np.ndarray, k: int) -> np.ndarray:
    """``W`` (``M x K``, ``values``' dtype), zeros where no entry is stored."""
    check_array(values, "values", ndim=2, dtypes=HALF_DTYPES)
    check_rows(values, indices, k)
    cols = indices.astype(np.int64) & 0xFFFF
    if (cols > k).any():
        raise ValueError(f"indices: columns must be below {k} (or {k}, padding)")
    rows = np.broadcast_to(np.arange(values.shape[0])[:, None], cols.shape)
    kept = cols < k
    dense = np.zeros((values.shape[0], k), dtype=values.dtype)
    dense[rows[kept], cols[kept]] = values[kept]
    return dense


def spmm_ell_rows_linear(values: np.ndarray, indices: np.ndarray, k: int, x: np.ndarray) -> np.ndarray:
    """``Y = x @ W^T`` (``N x M``) for ``x`` (``N x K``, ``values``' dtype)."""
    w = densify_ell_rows(values, indices, k)
    check_array(x, "x", ndim=2, dtypes=(values.dtype,))
    if x.shape[1] != k:
        raise ValueError(f"x: expected shape (N, {k}), got {x.shape}")
    y = x.astype(np.float32) @ w.astype(np.float32).T
    return np.ascontiguousarray(y.astype(values.dtype))
