"""Reference SpMM: C = A @ B with A sparse (CSR, COO, blocked-ELL) and B dense.

The executable specification of the kernels in ``sparsekit/gpu/spmm.py`` (same function
names, same arguments, same result). Each function walks the format's own
structure, so a reader sees the loop the GPU kernel parallelises:

============================  =============================================
function                      loop
============================  =============================================
``spmm_dense(a, b)``          the textbook triple loop, as one ``@``
``spmm_csr(csr, b)``          over rows, then over the row's stored entries
``spmm_coo(coo, b)``          over the stored (row, col, value) triples
``spmm_blocked_ell(bell, b)`` over the block slots of every block row
============================  =============================================

Layouts and precision (the same for every function here and in
``sparsekit/reference/uspmm.py``):

* ``A`` is ``M x K``; ``b`` is a 2-D NumPy array ``K x N`` of the same dtype as
  ``A``'s values (float16, float32 or float64), in any memory order.
* Products and sums are taken in **float64**; the result is rounded once to
  ``b.dtype`` at the end. ``C`` is ``M x N``, C-contiguous.
* A dtype mismatch, a ``b`` with the wrong number of rows or rank, or a
  non-NumPy ``b`` raises (``TypeError``/``ValueError`` naming the argument);
  nothing is cast.
"""
from __future__ import annotations

import numpy as np

from sparsekit.checks import FLOAT_DTYPES, check_array

__all__ = ["check_rhs", "spmm_dense", "spmm_csr", "spmm_coo", "spmm_blocked_ell"]


def check_rhs(b, *, shape, dtype, name: str = "b") -> np.ndarray:
    """Check the dense right-hand side of ``A @ b`` for an ``A`` of ``shape`` and ``dtype``.

    ``b`` must be a 2-D NumPy array with ``shape[1]`` rows and ``A``'s dtype.
    Returns ``b`` itself.
    """
    check_array(b, name, ndim=2, dtypes=FLOAT_DTYPES)
    if b.dtype != np.dtype(dtype):
        raise TypeError(f"{name}: dtype must equal the sparse matrix's dtype {np.dtype(dtype)}, "
                        f"got {b.dtype} (nothing is cast; convert one of them first)")
    if b.shape[0] != shape[1]:
        raise ValueError(f"{name}: expected shape ({shape[1]}, *) to multiply a {shape[0]}x{shape[1]} "
                         f"matrix, got {b.shape}")
    return b


def spmm_dense(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``C = a @ b`` for a dense ``a`` (the baseline every sparse result must equal).

    >>> a = np.array([[1.0, 0.0], [0.0, 2.0]], dtype=np.float32)
    >>> spmm_dense(a, np.ones((2, 3), np.float32))
    array([[1., 1., 1.],
           [2., 2., 2.]], dtype=float32)
    """
    check_array(a, "a", ndim=2, dtypes=FLOAT_DTYPES)
    check_rhs(b, shape=a.shape, dtype=a.dtype)
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(b.dtype)


def spmm_csr(csr, b: np.ndarray) -> np.ndarray:
    """``C = A @ b`` for ``A`` in CSR: row ``i`` holds ``data[indptr[i]:indptr[i+1]]``
    at columns ``indices[indptr[i]:indptr[i+1]]``.

    One pass per row (a GPU warp per row in ``sparsekit/gpu/spmm.py``): the row's values
    times the rows of ``b`` they select, summed. Empty rows give zeros.
    """
    check_rhs(b, shape=csr.shape, dtype=csr.data.dtype)
    m, n = csr.shape[0], b.shape[1]
    b64 = b.astype(np.float64)
    c = np.zeros((m, n), dtype=np.float64)
    for i in range(m):
        start, end = int(csr.indptr[i]), int(csr.indptr[i + 1])
        # c[i, :] = sum over the row's entries j of data[j] * b[indices[j], :]
        c[i] = csr.data[start:end].astype(np.float64) @ b64[csr.indices[start:end]]
    return c.astype(b.dtype)


def spmm_coo(coo, b: np.ndarray) -> np.ndarray:
    """``C = A @ b`` for ``A`` in COO: entry ``j`` is ``data[j]`` at ``(row[j], col[j])``.

    Each triple adds ``data[j] * b[col[j], :]`` into ``C[row[j], :]``; the
    scatter-add (``np.add.at``) is the atomic add of the GPU kernel.
    """
    check_rhs(b, shape=coo.shape, dtype=coo.data.dtype)
    m, n = coo.shape[0], b.shape[1]
    c = np.zeros((m, n), dtype=np.float64)
    contrib = coo.data.astype(np.float64)[:, None] * b.astype(np.float64)[coo.col]
    np.add.at(c, coo.row, contrib)
    return c.astype(b.dtype)


def spmm_blocked_ell(bell, b: np.ndarray) -> np.ndarray:
    """``C = A @ b`` for ``A`` in blocked-ELL with square blocks of side ``bs = bell.block``.

    Block row ``r`` (rows ``r*bs .. r*bs+bs-1`` of ``A``) stores ``Kb`` dense
    ``bs x bs`` blocks ``values[r, s]`` at block columns ``indices[r, s]``
    (columns ``indices[r, s]*bs ..``). The loop runs over the ``Kb`` slots, the
    same for every block row (blocked-uniform sparsity): slot ``s`` adds
    ``values[r, s] @ b[rows of block column indices[r, s]]`` to block row ``r``.
    """
    check_rhs(b, shape=bell.shape, dtype=bell.values.dtype)
    bs = int(bell.block)
    m, k = bell.shape
    n = b.shape[1]
    mb, kb_slots = bell.indices.shape
    # b viewed as K/bs blocks of bs rows: b_blocks[j] are the rows of block column j.
    b_blocks = b.astype(np.float64).reshape(k // bs, bs, n)
    c = np.zeros((mb, bs, n), dtype=np.float64)
    for s in range(kb_slots):
        a_s = bell.values[:, s].astype(np.float64)           # (M/bs, bs, bs)
        b_s = b_blocks[bell.indices[:, s]]                   # (M/bs, bs, N)
        c += np.einsum("rij,rjn->rin", a_s, b_s)
    return c.reshape(m, n).astype(b.dtype)
