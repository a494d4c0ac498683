"""CPU SpMM in every loop order, tiled, serial and parallel (Numba ``njit``).

The teaching track's first steps (../shared/papers/spmm-course-slides.txt,
"Loop Interchange", "Details about Tiling / Blocks", "Multithreading"):
``C = A @ B`` with ``A`` (``M x K``) sparse and ``B`` (``K x N``) dense. Every
function here computes what ``sparsekit/reference/spmm.py`` computes and a test proves it
(``tests/test_cpu_spmm.py``):

==============================  ==============================  ===========================
function                        loop nest (outer to inner)      equals
==============================  ==============================  ===========================
``spmm_dense(a, b, order=)``    the six orders of i, j, k       ``sparsekit.reference.spmm.spmm_dense``
``spmm_csr(csr, b, "rowwise")`` i, p in row i, j  (Gustavson)   ``sparsekit.reference.spmm.spmm_csr``
``spmm_csr(csr, b, "inner")``   i, j, p in row i  (dot product) ``sparsekit.reference.spmm.spmm_csr``
``spmm_csr(csr, b, "colwise")`` j, i, p in row i                ``sparsekit.reference.spmm.spmm_csr``
``spmm_csr(csr, b, "outer")``   k, p in column k, j  (outer     ``sparsekit.reference.spmm.spmm_csr``
                                product; walks A by columns)
``spmm_csr_tiled(csr, b, ...)`` row panel, N tile, K tile,      ``sparsekit.reference.spmm.spmm_csr``
                                i, p in (row i, K tile), j
``spmm_coo(coo, b)``            p over (row, col, value), j     ``sparsekit.reference.spmm.spmm_coo``
==============================  ==============================  ===========================

Every function takes ``parallel=``: ``False`` runs one thread, ``True`` runs
the same loop nest with its outermost independent loop as a ``prange`` over
Numba's threads (``numba.get_num_threads()``). Loops are chosen so that no
two threads ever write the same element of ``C``: no atomics, and the parallel
result equals the serial one bit for bit.

Precision and layouts: ``A``'s values and ``b`` share a dtype, float32 or
float64 (Numba's CPU backend has no float16 arithmetic, so float16 raises a
``TypeError``). Products are summed in that dtype in the order of the loop
nest, so results differ from the float64 reference by rounding only; the
tests bound that by the reduction length. ``C`` is a new C-contiguous
``M x N`` array of ``b.dtype``.

``spmm_csr`` accepts any object with CSR's ``indptr``, ``indices``, ``data``
and ``shape`` (``sparsekit.formats.CSR`` or a ``scipy.sparse.csr_array``)
with sorted column indices; ``spmm_coo`` one with ``row``, ``col``,
``data`` and ``shape`` in canonical (row-major sorted) order.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from sparsekit.reference.spmm import check_rhs
from sparsekit.checks import check_array, check_int

__all__ = ["ORDERS", "DENSE_ORDERS", "TILES", "spmm_dense", "spmm_csr", "spmm_csr_tiled",
           "spmm_coo", "csr_to_csc"]

#: CSR loop orders, in the order the lesson shows them.
ORDERS = ("rowwise", "inner", "colwise", "outer")
#: The six dense loop orders; "ijk" is the slides' baseline.
DENSE_ORDERS = ("ijk", "ikj", "jik", "jki", "kij", "kji")
#: Tile sizes the slides tune over ("B in [16, 32, 64, 128]").
TILES = (16, 32, 64, 128)
#: dtypes the CPU kernels compute in.
CPU_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _serial_and_parallel(fn):
    """Compile ``fn`` twice: serially (``prange`` acts as ``range``) and with ``parallel=True``."""
    return njit(cache=True)(fn), njit(parallel=True, cache=True)(fn)


# --------------------------------------------------------------------------- dense baseline
# The slides' "Baseline" listing: V_C[i][j] += V_A[i][k] * V_B[k][j] in every
# loop order. The outermost loop is the prange; orders whose outer loop is k
# would race on C, so their parallel form splits the middle loop instead.

def _dense_ijk(a, b, c):
    m, kk = a.shape
    n = b.shape[1]
    for i in prange(m):
        for j in range(n):
            acc = c[i, j]
            for k in range(kk):
                acc += a[i, k] * b[k, j]
            c[i, j] = acc


def _dense_ikj(a, b, c):
    m, kk = a.shape
    n = b.shape[1]
    for i in prange(m):
        for k in range(kk):
            aik = a[i, k]
            for j in range(n):
                c[i, j] += aik * b[k, j]


def _dense_jik(a, b, c):
    m, kk = a.shape
    n = b.shape[1]
    for j in prange(n):
        for i in range(m):
            acc = c[i, j]
            for k in range(kk):
                acc += a[i, k] * b[k, j]
            c[i, j] = acc


def _dense_jki(a, b, c):
    m, kk = a.shape
    n = b.shape[1]
    for j in prange(n):
        for k in range(kk):
            bkj = b[k, j]
            for i in range(m):
                c[i, j] += a[i, k] * bkj


def _dense_kij(a, b, c):
    m, kk = a.shape
    n = b.shape[1]
    for k in range(kk):
        for i in prange(m):          # k outside: split i so threads own rows of C
            aik = a[i, k]
            for j in range(n):
                c[i, j] += aik * b[k, j]


def _dense_kji(a, b, c):
    m, kk = a.shape
    n = b.shape[1]
    for k in range(kk):
        for j in prange(n):          # k outside: split j so threads own columns of C
            bkj = b[k, j]
            for i in range(m):
                c[i, j] += a[i, k] * bkj


_DENSE = {name: _serial_and_parallel(fn) for name, fn in
          (("ijk", _dense_ijk), ("ikj", _dense_ikj), ("jik", _dense_jik),
           ("jki", _dense_jki), ("kij", _dense_kij), ("kji", _dense_kji))}


# --------------------------------------------------------------------------- CSR loop orders

def _csr_rowwise(indptr, indices, data, b, c):
    # Gustavson: row i of C is the sum of A[i, k] * (row k of B) over row i's nonzeros.
    # The slides' CSR listing; B and C are both read along rows (unit stride in j).
    n = c.shape[1]
    for i in prange(c.shape[0]):
        for p in range(indptr[i], indptr[i + 1]):
            k = indices[p]
            v = data[p]
            for j in range(n):
                c[i, j] += v * b[k, j]


def _csr_inner(indptr, indices, data, b, c):
    # Dot products: C[i, j] = A[i, :] . B[:, j]; B is read down a column (stride N).
    n = c.shape[1]
    for i in prange(c.shape[0]):
        for j in range(n):
            acc = c[i, j]
            for p in range(indptr[i], indptr[i + 1]):
                acc += data[p] * b[indices[p], j]
            c[i, j] = acc


def _csr_colwise(indptr, indices, data, b, c):
    # Column j of C at a time: all of A is re-read for every column of B.
    m = c.shape[0]
    for j in prange(c.shape[1]):
        for i in range(m):
            acc = c[i, j]
            for p in range(indptr[i], indptr[i + 1]):
                acc += data[p] * b[indices[p], j]
            c[i, j] = acc


def _csc_outer(colptr, rows, data, b, c, tile_n):
    # Outer products: C += A[:, k] (x) B[k, :] for each k. Walks A by columns
    # (CSC). Threads split N into tiles of tile_n columns so none share a C element.
    kk = b.shape[0]
    n = c.shape[1]
    for t in prange((n + tile_n - 1) // tile_n):
        j0 = t * tile_n
        j1 = min(n, j0 + tile_n)
        for k in range(kk):
            brow = b[k, j0:j1]
            for p in range(colptr[k], colptr[k + 1]):
                crow = c[rows[p], j0:j1]
                v = data[p]
                for j in range(j1 - j0):
                    crow[j] += v * brow[j]


_CSR = {"rowwise": _serial_and_parallel(_csr_rowwise),
        "inner": _serial_and_parallel(_csr_inner),
        "colwise": _serial_and_parallel(_csr_colwise)}
_OUTER = _serial_and_parallel(_csc_outer)


def _csr_tiled(indptr, indices, data, b, c, tile_m, tile_n, tile_k):
    # Control loops over (row panel, N tile, K tile), as in the slides' tiling
    # listing; inside, the rowwise nest restricted to the tile. The tile_k x tile_n
    # block of B is reused by every row of the panel while it is in cache.
    # cursor[r] remembers where row i0 + r stopped in the previous K tile: column
    # indices are sorted, so each row's entries are visited once per N tile.
    # The innermost loop runs over views (crow, brow) from 0: Numba then knows
    # the index is non-negative, drops the wraparound check and vectorises it
    # (indexing c[i, j] with j from j0 was 4x slower at 1024 x 1024 x 256).
    m, n = c.shape
    kk = b.shape[0]
    for panel in prange((m + tile_m - 1) // tile_m):
        i0 = panel * tile_m
        i1 = min(m, i0 + tile_m)
        cursor = np.empty(i1 - i0, dtype=np.int64)
        for j0 in range(0, n, tile_n):
            j1 = min(n, j0 + tile_n)
            for r in range(i1 - i0):
                cursor[r] = indptr[i0 + r]
            for k0 in range(0, kk, tile_k):
                k1 = k0 + tile_k
                for i in range(i0, i1):
                    p = cursor[i - i0]
                    end = indptr[i + 1]
                    crow = c[i, j0:j1]
                    while p < end and indices[p] < k1:
                        brow = b[indices[p], j0:j1]
                        v = data[p]
                        for j in range(j1 - j0):
                            crow[j] += v * brow[j]
                        p += 1
                    cursor[i - i0] = p


_TILED = _serial_and_parallel(_csr_tiled)


@njit(cache=True)
def _rows_sorted(indptr, indices):
    for i in range(indptr.size - 1):
        for p in range(indptr[i] + 1, indptr[i + 1]):
            if indices[p] <= indices[p - 1]:
                return False
    return True


# --------------------------------------------------------------------------- COO

def _coo_serial(row, col, data, b, c):
    # One pass over the triples: C[row, :] += value * B[col, :].
    n = c.shape[1]
    for p in range(data.size):
        i = row[p]
        k = col[p]
        v = data[p]
        for j in range(n):
            c[i, j] += v * b[k, j]


@njit(parallel=True, cache=True)
def _coo_parallel(row, col, data, b, c):
    # Canonical COO is sorted by row, so splitting the triples at row boundaries
    # (searchsorted) gives each thread whole rows of C.
    m, n = c.shape
    starts = np.searchsorted(row, np.arange(m + 1))
    for i in prange(m):
        for p in range(starts[i], starts[i + 1]):
            k = col[p]
            v = data[p]
            for j in range(n):
                c[i, j] += v * b[k, j]


_COO_SERIAL = njit(cache=True)(_coo_serial)


@njit(cache=True)
def _csr_to_csc(m, k, indptr, indices, data):
    colptr = np.zeros(k + 1, dtype=np.int64)
    for p in range(indices.size):
        colptr[indices[p] + 1] += 1
    for j in range(k):
        colptr[j + 1] += colptr[j]
    fill = colptr[:-1].copy()
    rows = np.empty(indices.size, dtype=np.int64)
    vals = np.empty(data.size, dtype=data.dtype)
    for i in range(m):                         # rows in order: each column's rows come out sorted
        for p in range(indptr[i], indptr[i + 1]):
            q = fill[indices[p]]
            rows[q] = i
            vals[q] = data[p]
            fill[indices[p]] += 1
    return colptr, rows, vals


# --------------------------------------------------------------------------- checks and launchers

def _check_values(x, name: str) -> None:
    if x.dtype not in CPU_DTYPES:
        raise TypeError(f"{name}: the CPU kernels compute in float32 or float64 (Numba has no CPU "
                        f"float16 arithmetic), got {x.dtype}")


def _check_csr(csr, name: str = "csr"):
    for attr in ("indptr", "indices", "data", "shape"):
        if not hasattr(csr, attr):
            raise TypeError(f"{name}: expected a CSR matrix (indptr, indices, data, shape), "
                            f"got {type(csr).__name__} without '{attr}'")
    m = int(csr.shape[0])
    check_array(csr.indptr, f"{name}.indptr", ndim=1, dtypes=None, shape=(m + 1,))
    check_array(csr.indices, f"{name}.indices", ndim=1, dtypes=None)
    check_array(csr.data, f"{name}.data", ndim=1, dtypes=None, shape=csr.indices.shape)
    _check_values(csr.data, f"{name}.data")
    return csr.indptr, csr.indices, csr.data


def _check_parallel(parallel) -> int:
    if not isinstance(parallel, bool):
        raise TypeError(f"parallel: expected True or False, got {type(parallel).__name__}")
    return int(parallel)


def spmm_dense(a: np.ndarray, b: np.ndarray, *, order: str = "ijk", parallel: bool = False) -> np.ndarray:
    """``C = a @ b`` for a dense ``a`` by the triple loop in ``order`` (one of :data:`DENSE_ORDERS`).

    >>> a = np.array([[1.0, 0.0], [0.0, 2.0]])
    >>> spmm_dense(a, np.ones((2, 3)), order="ikj")
    array([[1., 1., 1.],
           [2., 2., 2.]])
    """
    check_array(a, "a", ndim=2)
    _check_values(a, "a")
    check_rhs(b, shape=a.shape, dtype=a.dtype)
    if order not in _DENSE:
        raise ValueError(f"order: expected one of {DENSE_ORDERS}, got {order!r}")
    c = np.zeros((a.shape[0], b.shape[1]), dtype=b.dtype)
    _DENSE[order][_check_parallel(parallel)](a, b, c)
    return c


def spmm_csr(csr, b: np.ndarray, order: str = "rowwise", *, parallel: bool = False) -> np.ndarray:
    """``C = A @ b`` for ``A`` in CSR, by the loop nest ``order`` (one of :data:`ORDERS`).

    ``"outer"`` first transposes the structure to CSC (:func:`csr_to_csc`, a
    counting sort; its time is part of the call).

    >>> import scipy.sparse as sp
    >>> a = sp.csr_array(np.array([[0.0, 2.0], [1.0, 0.0]]))
    >>> spmm_csr(a, np.array([[1.0, 2.0], [3.0, 4.0]]), "outer")
    array([[6., 8.],
           [1., 2.]])
    """
    indptr, indices, data = _check_csr(csr)
    check_rhs(b, shape=csr.shape, dtype=data.dtype)
    if order not in ORDERS:
        raise ValueError(f"order: expected one of {ORDERS}, got {order!r}")
    par = _check_parallel(parallel)
    c = np.zeros((csr.shape[0], b.shape[1]), dtype=b.dtype)
    if order == "outer":
        colptr, rows, vals = csr_to_csc(csr)
        _OUTER[par](colptr, rows, vals, b, c, 64)
    else:
        _CSR[order][par](indptr, indices, data, b, c)
    return c


def csr_to_csc(csr):
    """The CSC arrays ``(colptr, rows, data)`` of a CSR matrix (rows sorted within each column)."""
    indptr, indices, data = _check_csr(csr)
    return _csr_to_csc(int(csr.shape[0]), int(csr.shape[1]), indptr, indices, data)


def spmm_csr_tiled(csr, b: np.ndarray, *, tile_n: int = 64, tile_k: int = 64, tile_m: int = 64,
                   parallel: bool = False) -> np.ndarray:
    """``C = A @ b`` for ``A`` in CSR, tiled over N and K (the slides' "control loops").

    Rows are taken in panels of ``tile_m`` (the unit of parallel work); each
    panel sweeps ``tile_n``-wide column tiles of ``b`` and, inside those,
    ``tile_k``-tall row tiles, so a ``tile_k x tile_n`` block of ``b`` is
    reused by every row of the panel. The slides tune ``tile_n`` and ``tile_k``
    over :data:`TILES`; any positive size is accepted. Column indices must be
    sorted within rows (checked: one pass over ``indices``).
    """
    indptr, indices, data = _check_csr(csr)
    check_rhs(b, shape=csr.shape, dtype=data.dtype)
    tm = check_int(tile_m, "tile_m", minimum=1)
    tn = check_int(tile_n, "tile_n", minimum=1)
    tk = check_int(tile_k, "tile_k", minimum=1)
    if not _rows_sorted(indptr, indices):
        raise ValueError("csr.indices: the tiled kernel needs sorted, unique column indices within each row "
                         "(it walks each row's entries K tile by K tile); sort them first")
    c = np.zeros((csr.shape[0], b.shape[1]), dtype=b.dtype)
    _TILED[_check_parallel(parallel)](indptr, indices, data, b, c, tm, tn, tk)
    return c


def spmm_coo(coo, b: np.ndarray, *, parallel: bool = False) -> np.ndarray:
    """``C = A @ b`` for ``A`` in canonical COO (triples sorted row-major).

    The serial form needs no order; the parallel form relies on the row order
    to give each thread whole rows (an unsorted ``row`` raises ``ValueError``).
    """
    for attr in ("row", "col", "data", "shape"):
        if not hasattr(coo, attr):
            raise TypeError(f"coo: expected a COO matrix (row, col, data, shape), "
                            f"got {type(coo).__name__} without '{attr}'")
    check_array(coo.row, "coo.row", ndim=1, dtypes=None)
    check_array(coo.col, "coo.col", ndim=1, dtypes=None, shape=coo.row.shape)
    check_array(coo.data, "coo.data", ndim=1, dtypes=None, shape=coo.row.shape)
    _check_values(coo.data, "coo.data")
    check_rhs(b, shape=coo.shape, dtype=coo.data.dtype)
    par = _check_parallel(parallel)
    c = np.zeros((coo.shape[0], b.shape[1]), dtype=b.dtype)
    if par:
        if coo.row.size > 1 and np.any(np.diff(coo.row) < 0):
            raise ValueError("coo.row: the parallel COO kernel needs rows sorted ascending (canonical COO)")
        _coo_parallel(coo.row, coo.col, coo.data, b, c)
    else:
        _COO_SERIAL(coo.row, coo.col, coo.data, b, c)
    return c
