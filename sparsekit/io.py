"""Read and write sparse matrices: Matrix Market (``.mtx``) and the ``.smtx`` pattern format.

``.smtx`` is the text format of the Deep Learning Matrix Collection used by
Sputnik's benchmarks (Gale et al. 2020): three lines,

1. ``rows, cols, nnz``
2. the ``rows + 1`` row offsets (CSR ``indptr``), separated by spaces;
3. the ``nnz`` column indices, separated by spaces.

It stores the pattern only; :func:`read_smtx` draws the values from a
standard normal with a seed (the same file and seed give the same matrix).
Column order inside a row carries no meaning in a pattern, so rows are sorted
on reading (``CSR`` keeps sorted, unique columns); a repeated column in a row
is an error.

Matrix Market goes through ``scipy.io.mmread``/``mmwrite``; a pattern
``.mtx`` gets seeded values the same way.

>>> import os, tempfile
>>> import numpy as np
>>> from sparsekit.formats import CSR
>>> a = CSR.from_dense(np.array([[0., 1.5, 0.], [2., 0., 3.]], dtype=np.float32))
>>> path = os.path.join(tempfile.mkdtemp(), "a.smtx")
>>> write_smtx(path, a)
>>> print(open(path).read(), end="")
2, 3, 3
0 1 3
1 0 2
>>> b = read_smtx(path, seed=0)
>>> b.indptr.tolist(), b.indices.tolist(), b.data.dtype
([0, 1, 3], [1, 0, 2], dtype('float32'))
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from sparsekit.checks import check_int
from sparsekit.formats import CSR

__all__ = ["read_smtx", "write_smtx", "read_mtx", "write_mtx", "read_matrix", "seeded_values"]

_VALUE_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _value_dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in _VALUE_DTYPES:
        raise TypeError(f"dtype: must be float16, float32 or float64, got {dt}")
    return dt


def seeded_values(nnz: int, *, seed: int = 0, dtype=np.float32) -> np.ndarray:
    """``nnz`` values drawn from N(0, 1) with ``seed``, in ``dtype`` (what a pattern file gets)."""
    n = check_int(nnz, "nnz", minimum=0)
    return np.random.default_rng(check_int(seed, "seed", minimum=0)).standard_normal(n).astype(_value_dtype(dtype))


def _ints(line: str, what: str, path) -> np.ndarray:
    try:
        return np.array(line.split(), dtype=np.int64)
    except ValueError:
        raise ValueError(f"{path}: {what} must be integers separated by spaces, got {line[:60]!r}") from None


def read_smtx(path, *, dtype=np.float32, seed: int = 0) -> CSR:
    """Read a ``.smtx`` pattern file into a :class:`CSR` with seeded N(0, 1) values."""
    dt = _value_dtype(dtype)
    with open(path) as f:
        lines = [f.readline(), f.readline(), f.readline()]
        rest = f.read().strip()
    if rest:
        raise ValueError(f"{path}: expected 3 lines (header, row offsets, column indices), found more")
    header = [h.strip() for h in lines[0].split(",")]
    if len(header) != 3 or not all(h.isdigit() for h in header):
        raise ValueError(f"{path}: line 1 must be 'rows, cols, nnz', got {lines[0].strip()[:60]!r}")
    m, k, nnz = (int(h) for h in header)
    indptr = _ints(lines[1], "line 2 (row offsets)", path)
    indices = _ints(lines[2], "line 3 (column indices)", path)
    if indptr.size != m + 1:
        raise ValueError(f"{path}: line 2 should hold rows + 1 = {m + 1} row offsets, got {indptr.size}")
    if indices.size != nnz:
        raise ValueError(f"{path}: line 3 should hold nnz = {nnz} column indices, got {indices.size}")
    if indptr[0] != 0 or indptr[-1] != nnz or (np.diff(indptr) < 0).any():
        raise ValueError(f"{path}: row offsets must start at 0, never decrease and end at nnz = {nnz}")
    if nnz and (indices.min() < 0 or indices.max() >= k):
        bad = indices.min() if indices.min() < 0 else indices.max()
        raise ValueError(f"{path}: column indices must lie in [0, {k}), found {bad}")
    rows = np.repeat(np.arange(m), np.diff(indptr))
    order = np.lexsort((indices, rows))
    indices = indices[order]
    if nnz and ((np.diff(indices) == 0) & (np.diff(rows) == 0)).any():
        r = int(rows[1:][(np.diff(indices) == 0) & (np.diff(rows) == 0)][0])
        raise ValueError(f"{path}: row {r} repeats a column index")
    index_dtype = np.int32 if max(k, nnz) < 2**31 else np.int64
    return CSR(indptr.astype(index_dtype), indices.astype(index_dtype),
               seeded_values(nnz, seed=seed, dtype=dt), (m, k))


def write_smtx(path, csr) -> None:
    """Write the pattern of ``csr`` (its values are dropped) as ``.smtx``."""
    m, k = csr.shape
    nnz = int(csr.indptr[-1])
    with open(path, "w") as f:
        f.write(f"{m}, {k}, {nnz}\n")
        f.write(" ".join(map(str, np.asarray(csr.indptr).tolist())) + "\n")
        f.write(" ".join(map(str, np.asarray(csr.indices[:nnz]).tolist())) + "\n")


def read_mtx(path, *, dtype=np.float32, seed: int = 0) -> CSR:
    """Read Matrix Market through ``scipy.io.mmread``; a ``pattern`` file gets seeded values.

    Real values are converted to ``dtype`` (the file's precision is a file
    property, not the kernel's); complex or integer fields other than pattern
    raise ``TypeError``.
    """
    import scipy.io
    import scipy.sparse as sp

    dt = _value_dtype(dtype)
    info = scipy.io.mminfo(path)
    field = info[4]
    a = sp.csr_array(scipy.io.mmread(path))
    a.sum_duplicates()
    a.sort_indices()
    if field == "pattern":
        data = seeded_values(a.nnz, seed=seed, dtype=dt)
    elif field in ("real", "integer"):
        data = a.data.astype(dt)
    else:
        raise TypeError(f"{path}: field must be real, integer or pattern, got {field}")
    return CSR(a.indptr.astype(np.int32), a.indices.astype(np.int32), data, a.shape)


def write_mtx(path, csr) -> None:
    """Write ``csr`` with its values as a real, general Matrix Market file (float16 is stored widened)."""
    import scipy.io
    import scipy.sparse as sp

    data = np.asarray(csr.data)
    if data.dtype == np.float16:
        data = data.astype(np.float32)
    a = sp.csr_array((data, np.asarray(csr.indices), np.asarray(csr.indptr)), shape=csr.shape)
    scipy.io.mmwrite(os.fspath(path), a)


def read_matrix(path, *, dtype=np.float32, seed: int = 0) -> CSR:
    """Read ``.smtx`` or ``.mtx`` by the file's suffix."""
    suffix = Path(path).suffix.lower()
    if suffix == ".smtx":
        return read_smtx(path, dtype=dtype, seed=seed)
    if suffix == ".mtx":
        return read_mtx(path, dtype=dtype, seed=seed)
    raise ValueError(f"path: expected a .smtx or .mtx file, got {os.fspath(path)!r}")
