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


#: Rows a file may declare: a CSR keeps ``rows + 1`` row offsets, 16 GiB of int64 at this many.
MAX_ROWS = 2**31 - 1


def _ints(line: str, what: str, path) -> np.ndarray:
    try:
        return np.array(line.split(), dtype=np.int64)
    except ValueError:
        raise ValueError(f"{path}: {what} must be integers separated by spaces, got {line[:60]!r}") from None
    except OverflowError:
        raise ValueError(f"{path}: {what} must be integers below 2**63, got {line[:60]!r}") from None


def _index_dtype(cols: int, nnz: int) -> np.dtype:
    """int32 where it indexes every column and stored entry, else int64."""
    return np.dtype(np.int32 if max(cols, nnz) < 2**31 else np.int64)


def _check_csr(csr, name: str = "csr") -> CSR:
    """``csr`` is a :class:`CSR` whose full validation passes (what a writer may write)."""
    if not isinstance(csr, CSR):
        raise TypeError(f"{name}: expected a sparsekit.formats.CSR (other formats: .to_csr()), "
                        f"got {type(csr).__name__}")
    csr.validate(full=True)
    return csr


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
    if m > MAX_ROWS:
        raise ValueError(f"{path}: line 1 declares {m} rows; at most {MAX_ROWS} are supported")
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
    index_dtype = _index_dtype(k, nnz)
    return CSR(indptr.astype(index_dtype), indices.astype(index_dtype),
               seeded_values(nnz, seed=seed, dtype=dt), (m, k))


def write_smtx(path, csr) -> None:
    """Write the pattern of ``csr`` (a valid :class:`CSR`; its values are dropped) as ``.smtx``."""
    _check_csr(csr)
    m, k = csr.shape
    nnz = int(csr.indptr[-1])
    with open(path, "w") as f:
        f.write(f"{m}, {k}, {nnz}\n")
        f.write(" ".join(map(str, np.asarray(csr.indptr).tolist())) + "\n")
        f.write(" ".join(map(str, np.asarray(csr.indices[:nnz]).tolist())) + "\n")


def _check_mtx_header(path, rows: int, cols: int, entries: int, layout: str, symmetry: str) -> None:
    """Refuse a header no file of this size can honour, before anything is allocated for it."""
    if rows > MAX_ROWS:
        raise ValueError(f"{path}: header declares {rows} rows; at most {MAX_ROWS} are supported")
    if entries > rows * cols:
        raise ValueError(f"{path}: header declares {entries} entries in a {rows} x {cols} matrix "
                         f"(at most {rows * cols})")
    if layout == "coordinate":
        least = 4 * entries                                     # "1 1\n" an entry
    else:                                                       # "0\n" a value; a symmetric array stores a triangle
        least = 2 * (entries if symmetry == "general" else rows * (rows - 1) // 2)
    size = os.path.getsize(path)
    if Path(path).suffix.lower() == ".mtx" and least > size:
        raise ValueError(f"{path}: header declares {entries} entries, at least {least} bytes of text; "
                         f"the file has {size}")


def _first_bad(a, bad: np.ndarray) -> str:
    """``"row r, column c"`` of the first stored entry of the CSR ``a`` flagged in ``bad``."""
    i = int(np.flatnonzero(bad)[0])
    return f"row {int(np.searchsorted(a.indptr, i, side='right')) - 1}, column {int(a.indices[i])}"


def read_mtx(path, *, dtype=np.float32, seed: int = 0) -> CSR:
    """Read Matrix Market through ``scipy.io.mmread``; a ``pattern`` file gets seeded values.

    Real values are converted to ``dtype`` (the file's precision is a file
    property, not the kernel's); complex or integer fields other than pattern
    raise ``TypeError``. Entries repeated in the file are summed (SciPy's
    reading of duplicates). Values must be finite in the file and in ``dtype``
    (a value float16 cannot hold is refused, not made Inf). Indices are int32,
    or int64 where the header's columns or entries need it. A header that
    declares more than :data:`MAX_ROWS` rows, more entries than cells or than
    the file has room for, and a file SciPy cannot parse, raise ``ValueError``
    naming the file.
    """
    import scipy.io
    import scipy.sparse as sp

    dt = _value_dtype(dtype)
    try:
        rows, cols, entries, layout, field, symmetry = scipy.io.mminfo(path)
    except (ValueError, OverflowError) as err:
        raise ValueError(f"{path}: not a readable Matrix Market header ({err})") from None
    if field not in ("real", "integer", "pattern"):
        raise TypeError(f"{path}: field must be real, integer or pattern, got {field}")
    _check_mtx_header(path, rows, cols, entries, layout, symmetry)
    try:
        a = sp.csr_array(scipy.io.mmread(path))
    except (ValueError, OverflowError) as err:
        raise ValueError(f"{path}: not a readable Matrix Market file ({err})") from None
    a.sum_duplicates()
    a.sort_indices()
    if field == "pattern":
        data = seeded_values(a.nnz, seed=seed, dtype=dt)
    else:
        finite = np.isfinite(a.data)
        if not finite.all():
            raise ValueError(f"{path}: values must be finite, found {a.data[~finite][0]} at {_first_bad(a, ~finite)}")
        with np.errstate(over="ignore"):
            data = a.data.astype(dt)
        over = ~np.isfinite(data)
        if over.any():
            raise ValueError(f"{path}: value {a.data[over][0]} at {_first_bad(a, over)} overflows {dt} "
                             f"(largest {np.finfo(dt).max}); read it as float32")
    index_dtype = _index_dtype(cols, a.nnz)
    return CSR(a.indptr.astype(index_dtype), a.indices.astype(index_dtype), data, a.shape)


def write_mtx(path, csr) -> None:
    """Write ``csr`` (a valid :class:`CSR`) with its values as a real, general Matrix Market file (float16 is
    stored widened)."""
    import scipy.io
    import scipy.sparse as sp

    _check_csr(csr)
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
