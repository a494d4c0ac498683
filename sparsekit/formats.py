"""Sparse matrix formats: CSR, COO, ELL, BlockedELL, NM and BSR.

Each format is a small frozen dataclass of NumPy arrays plus the logical
``shape``. They share one surface:

* ``validate(full=False)``: cheap structural checks (ranks, dtypes, lengths,
  whether the index dtype can hold the shape) always; a full scan on request
  (index ranges, sortedness, duplicates, finite values). Messages name the
  array, the rule and what was found, e.g.
  ``"indptr: length should be 5 (rows + 1), got 4"``. Validators never modify
  what they check. Every constructor runs the cheap checks; ``to_dense``,
  ``mask``, ``to_scipy`` and ``to_csr`` run the full scan of the index data
  first (a negative, out-of-range or repeated index is a ``ValueError``, never
  a wrapped or overwritten entry).
* ``from_dense(dense, mask=None, ...)``: ``mask`` (boolean, the shape of
  ``dense``) selects the stored entries; by default ``dense != 0``. An entry
  the mask keeps is stored even when it is zero (an *explicit zero*), and an
  entry the mask drops is not stored even when it is non-zero.
* ``to_dense()``, ``mask()`` (True where an entry is stored), ``shape``,
  ``nnz`` (stored entries, explicit zeros included), ``density``
  (``nnz / (rows * cols)``), ``dtype``, a one-line repr, and ``nbytes()``.
* Instances are frozen (fields cannot be reassigned); the arrays are not
  copied, so do not modify them in place after construction.
* ``to_csr()``/``from_csr()`` on every format, and :func:`convert` between
  any two; all are lossless because they carry the stored pattern, explicit
  zeros included.
  ``from_scipy``/``to_scipy`` exist for CSR, COO and BSR.

Values are float16, float32 or float64 and must be finite: ``from_dense`` and
``validate(full=True)`` reject NaN and Inf (constructors do not scan values;
that is what ``full=True`` is for). Nothing is cast: a wrong dtype is a
``TypeError``.

Byte counts (``nbytes()``, used by the roofline model) count every array as
stored: values at their dtype's width, index data at its index dtype's width
(int16 is half of int32), and CSR/BSR row pointers included. The one exception
is :class:`NM`: its ``positions`` are kept as uint8 for clarity, but
``nbytes()`` counts the hardware metadata, ``ceil(log2(m))`` bits per stored
value (2 bits for 2:4, as in the Sparsity Roofline paper), rounded up to whole
bytes for the matrix; ``nbytes(packed=False)`` counts the uint8 array instead.

>>> import numpy as np
>>> from sparsekit.formats import CSR, ELL, convert
>>> w = np.array([[1., 0., 2.], [0., 3., 4.]], dtype=np.float32)
>>> ell = ELL.from_dense(w)
>>> ell
<ELL shape=(2, 3) k'=2 dtype=float32 index=int32>
>>> bool((convert(ell, CSR).to_dense() == w).all())
True
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import NamedTuple

import ml_dtypes
import numpy as np

from sparsekit.checks import check_array, check_divisible, check_indices, check_int

__all__ = ["NBytes", "CSR", "COO", "ELL", "BlockedELL", "NM", "BSR", "convert"]

#: Column/row index dtypes of CSR, COO and BSR (int16 needs the dimension <= 32767).
INDEX_DTYPES = (np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.int64))
#: Row-pointer dtypes of CSR and BSR.
INDPTR_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
#: Index dtypes of the uniform formats ELL and BlockedELL (the kernels read these).
ELL_INDEX_DTYPES = (np.dtype(np.int16), np.dtype(np.int32))


class NBytes(NamedTuple):
    """Bytes a matrix occupies: ``values`` (non-zeros), ``indices`` (all index data), ``total``."""

    values: int
    indices: int
    total: int


# ---------------------------------------------------------------------------
# shared helpers (argument checks specific to formats)
# ---------------------------------------------------------------------------

def _as_shape(shape, name: str = "shape") -> tuple[int, int]:
    ok = isinstance(shape, (tuple, list)) and len(shape) == 2 and all(
        isinstance(s, numbers.Integral) and not isinstance(s, bool) and s >= 0 for s in shape)
    if not ok:
        raise ValueError(f"{name}: expected a tuple of two non-negative integers, got {shape!r}")
    return int(shape[0]), int(shape[1])


def _as_blocksize(blocksize, name: str = "blocksize") -> tuple[int, int]:
    ok = isinstance(blocksize, (tuple, list)) and len(blocksize) == 2 and all(
        isinstance(s, numbers.Integral) and not isinstance(s, bool) and s >= 1 for s in blocksize)
    if not ok:
        raise ValueError(f"{name}: expected a tuple of two positive integers, got {blocksize!r}")
    return int(blocksize[0]), int(blocksize[1])


def _index_dtype(index_dtype, allowed, name: str = "index_dtype") -> np.dtype:
    try:
        dt = np.dtype(index_dtype)
    except TypeError:
        dt = None
    if dt not in allowed:
        names = ", ".join(d.name for d in allowed)
        raise TypeError(f"{name}: must be one of ({names}), got {index_dtype!r}")
    return dt


def _too_small(dtype: np.dtype, upper: int) -> bool:
    """Whether ``dtype`` is too narrow for a dimension of ``upper`` (int16: upper <= 32767)."""
    return upper > np.iinfo(dtype).max


def _fits(idx: np.ndarray, name: str, upper: int, what: str) -> None:
    """The dtype of ``idx`` can index a dimension of ``upper`` (cheap: dtype only)."""
    if _too_small(idx.dtype, upper):
        raise ValueError(f"{name}: {idx.dtype} cannot index {what} = {upper} "
                         f"(at most {np.iinfo(idx.dtype).max}); use a wider index dtype")


def _dense_and_mask(dense, mask) -> tuple[np.ndarray, np.ndarray]:
    check_array(dense, "dense", ndim=2, finite=True)
    if mask is None:
        return dense, dense != 0
    check_array(mask, "mask", ndim=2, dtypes=(np.bool_,), shape=dense.shape)
    return dense, mask


def _ptr_dtype(index_dtype: np.dtype, nnz: int) -> np.dtype:
    wide = index_dtype == np.int64 or nnz > np.iinfo(np.int32).max
    return np.dtype(np.int64) if wide else np.dtype(np.int32)


def _check_indptr(indptr: np.ndarray, rows: int, stored: int, what: str) -> None:
    """Cheap row-pointer rules (scipy's): length, first and last entry."""
    if len(indptr) != rows + 1:
        raise ValueError(f"indptr: length should be {rows + 1} ({what} + 1), got {len(indptr)}")
    if indptr[0] != 0:
        raise ValueError(f"indptr: first entry should be 0, got {indptr[0]}")
    if indptr[-1] != stored:
        raise ValueError(f"indptr: last entry should be {stored} (the number of stored "
                         f"{'entries' if what == 'rows' else 'blocks'}), got {indptr[-1]}")


def _check_indptr_full(indptr: np.ndarray) -> None:
    drop = np.flatnonzero(np.diff(indptr.astype(np.int64)) < 0)
    if drop.size:
        i = int(drop[0])
        raise ValueError(f"indptr: should be non-decreasing, got indptr[{i + 1}] = {indptr[i + 1]} "
                         f"< indptr[{i}] = {indptr[i]}")


def _check_ascending_segments(idx: np.ndarray, seg: np.ndarray, name: str, unit: str) -> None:
    """``idx`` strictly increases within each run of equal ``seg`` (sorted, no duplicates)."""
    if idx.size < 2:
        return
    bad = (np.diff(idx.astype(np.int64)) <= 0) & (seg[1:] == seg[:-1])
    hit = np.flatnonzero(bad)
    if hit.size:
        i = int(hit[0])
        raise ValueError(f"{name}: should be strictly increasing within each {unit} (sorted, no "
                         f"duplicates), {unit} {int(seg[i])} has {idx[i]} then {idx[i + 1]}")


def _check_ascending_rows(idx: np.ndarray, name: str, unit: str) -> None:
    """Each row of the 2-D ``idx`` strictly increases."""
    if idx.shape[1] < 2:
        return
    bad = np.diff(idx.astype(np.int64), axis=1) <= 0
    hit = np.argwhere(bad)
    if hit.size:
        r, c = (int(v) for v in hit[0])
        raise ValueError(f"{name}: should be strictly increasing within each {unit} (sorted, no "
                         f"duplicates), {unit} {r} has {idx[r, c]} then {idx[r, c + 1]}")


def _scipy_values(data: np.ndarray, dtype) -> np.ndarray:
    """Values for SciPy, which has no float16: widen only when asked, and only losslessly."""
    if dtype is None:
        if data.dtype == np.float16:
            raise TypeError("to_scipy: SciPy does not support float16 values; pass dtype=np.float32 "
                            "for an exact widening")
        return data.copy()
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)) or dt.itemsize < data.dtype.itemsize:
        raise TypeError(f"dtype: expected float32 or float64 at least as wide as {data.dtype} "
                        f"(a lossless widening), got {dtype!r}")
    return data.astype(dt)


def _scipy_data(data: np.ndarray, dtype) -> np.ndarray:
    """The stored values of a SciPy matrix in ``dtype`` (None: as stored), refusing NaN/Inf, also those a cast
    to a narrower dtype would make (70000 is inf in float16)."""
    with np.errstate(over="ignore"):
        out = data if dtype is None else data.astype(dtype)
    bad = ~np.isfinite(out.reshape(-1).astype(np.float64))
    if bad.any():
        found = float(data.reshape(-1)[np.flatnonzero(bad)[0]])
        if np.isfinite(found):
            largest = float(ml_dtypes.finfo(out.dtype).max)      # (ml_dtypes' finfo knows bfloat16 too)
            raise ValueError(f"a: value {found!r} overflows {out.dtype} (largest {largest!r})")
        raise ValueError(f"a: values must be finite, found {found!r} ({int(bad.sum())} NaN/Inf value(s))")
    return out


def _scipy_csr(a, dtype):
    """A canonical (sorted, duplicate-free) CSR copy of the SciPy sparse ``a`` and its values in ``dtype``."""
    import scipy.sparse as sp

    if not sp.issparse(a):
        raise TypeError(f"a: expected a scipy.sparse array or matrix, got {type(a).__name__}")
    c = a.tocsr(copy=True)
    c.sum_duplicates()  # SciPy's meaning of duplicates is their sum; also sorts indices
    return c, _scipy_data(c.data, dtype)


def _from_scipy_index(arr: np.ndarray, index_dtype) -> np.ndarray:
    if index_dtype is None:
        return arr
    return arr.astype(_index_dtype(index_dtype, INDEX_DTYPES))


class _Format:
    """Behaviour shared by every format (subclasses are frozen dataclasses)."""

    _values_field = "data"

    @property
    def dtype(self) -> np.dtype:
        """The value dtype."""
        return getattr(self, self._values_field).dtype

    @property
    def nnz(self) -> int:
        """Stored entries, explicit zeros included."""
        return int(getattr(self, self._values_field).size)

    @property
    def density(self) -> float:
        """``nnz / (rows * cols)`` (0.0 for an empty shape)."""
        m, k = self.shape
        return self.nnz / (m * k) if m * k else 0.0

    def _index_arrays(self) -> tuple[np.ndarray, ...]:
        raise NotImplementedError

    def validate(self, full: bool = False) -> None:
        """Check the format's invariants; never modifies the matrix.

        Parameters
        ----------
        full : bool, default False
            False: cheap structural checks only (ranks, dtypes, lengths, and
            whether the index dtype can index the shape); constructors run
            these. True: also scan the contents (index ranges, sortedness,
            duplicates, uniform lengths, finite values).

        Raises
        ------
        TypeError
            An array has the wrong dtype (or a parameter the wrong type).
        ValueError
            A rule is broken; the message names the array, the rule and what
            was found, e.g. ``"indptr: length should be 5 (rows + 1), got 4"``.
        """
        raise NotImplementedError

    def _check_stored_indices(self) -> None:
        """The full scan of the index data (ranges, order, no duplicates), without the values.

        ``to_dense``, ``mask``, ``to_scipy`` and ``to_csr`` run it before they index with the
        stored indices, so a bad index raises a ``ValueError`` naming the array, the rule and
        the value instead of wrapping around (a negative index) or overwriting (a duplicate).
        """
        raise NotImplementedError

    def to_dense(self) -> np.ndarray:
        """The dense (rows, cols) matrix, C order, in the value dtype; unstored entries are 0."""
        raise NotImplementedError

    def mask(self) -> np.ndarray:
        """Boolean (rows, cols) array, True where an entry is stored (explicit zeros included).

        ``type(x).from_dense(x.to_dense(), x.mask(), ...)`` rebuilds ``x`` exactly.
        """
        raise NotImplementedError

    def nbytes(self) -> NBytes:
        """Bytes of values and of index data, each array counted at its stored dtype.

        Returns
        -------
        NBytes
            ``(values, indices, total)``; ``indices`` includes row pointers.
        """
        v = int(getattr(self, self._values_field).nbytes)
        i = sum(int(a.nbytes) for a in self._index_arrays())
        return NBytes(v, i, v + i)

    def to_csr(self, *, index_dtype=None) -> "CSR":
        """The same stored entries (explicit zeros included) as :class:`CSR`.

        ``index_dtype`` defaults to this matrix's index dtype where CSR allows it and it
        can index every column, else int32.
        """
        if index_dtype is None:
            index_dtype = self._index_arrays()[-1].dtype
            if index_dtype not in INDEX_DTYPES or _too_small(index_dtype, self.shape[1]):
                index_dtype = np.int32
        return CSR.from_dense(self.to_dense(), self.mask(), index_dtype=index_dtype)

    @classmethod
    def from_csr(cls, csr, **kwargs):
        """This format from a :class:`CSR`, losslessly; the same as ``convert(csr, cls, **kwargs)``."""
        if not isinstance(csr, CSR):
            raise TypeError(f"csr: expected a CSR, got {type(csr).__name__}")
        return convert(csr, cls, **kwargs)


def convert(x, cls, **kwargs):
    """Convert the matrix ``x`` to the format ``cls`` without loss.

    The stored pattern travels with the values, so explicit zeros survive.

    Parameters
    ----------
    x : CSR, COO, ELL, BlockedELL, NM or BSR
    cls : type
        The target format.
    **kwargs
        The target's ``from_dense`` options (``index_dtype``, ``block``,
        ``n``/``m``, ``blocksize``).

    Raises
    ------
    TypeError
        ``x`` or ``cls`` is not a sparsekit format.
    ValueError
        The stored pattern does not fit the target (e.g. rows of different
        lengths for ELL, more than ``n`` per group for NM).

    >>> import numpy as np
    >>> w = np.array([[0., 1., 0., 2.], [3., 0., 4., 0.]], dtype=np.float16)
    >>> nm = convert(ELL.from_dense(w), NM, n=1, m=2)
    >>> nm
    <NM shape=(2, 4) n:m=1:2 dtype=float16 positions=uint8>
    >>> bool((convert(nm, COO).to_dense() == w).all())
    True
    """
    if not isinstance(x, _Format):
        raise TypeError(f"x: expected a sparsekit format, got {type(x).__name__}")
    if not (isinstance(cls, type) and issubclass(cls, _Format)):
        raise TypeError(f"cls: expected one of CSR, COO, ELL, BlockedELL, NM, BSR, got {cls!r}")
    return cls.from_dense(x.to_dense(), x.mask(), **kwargs)


# ---------------------------------------------------------------------------
# CSR
# ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False, repr=False)
class CSR(_Format):
    """Compressed sparse rows, SciPy-compatible (sorted, unique columns per row).

    Row ``r`` stores ``data[indptr[r]:indptr[r+1]]`` at columns
    ``indices[indptr[r]:indptr[r+1]]``. ``indices`` is int16, int32 or int64
    (int16 needs ``cols <= 32767``), ``indptr`` int32 or int64.

    >>> import numpy as np
    >>> w = np.array([[1., 0., 2.], [0., 0., 0.], [0., 3., 0.]], dtype=np.float32)
    >>> a = CSR.from_dense(w)
    >>> a
    <CSR shape=(3, 3) nnz=3 dtype=float32 index=int32>
    >>> a.indptr, a.indices
    (array([0, 2, 2, 3], dtype=int32), array([0, 2, 1], dtype=int32))
    >>> a.nbytes()
    NBytes(values=12, indices=28, total=40)
    >>> bool((CSR.from_scipy(a.to_scipy()).to_dense() == w).all())
    True

    A mask keeps entries whatever their value (here an explicit zero):

    >>> keep = w != 0
    >>> keep[1, 1] = True
    >>> CSR.from_dense(w, keep).nnz
    4
    >>> CSR(np.array([0, 1, 1]), np.array([5]), np.ones(1), (2, 3)).validate(full=True)
    Traceback (most recent call last):
    ...
    ValueError: indices: indices must lie in [0, 3), found 5
    """

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]

    def __post_init__(self):
        object.__setattr__(self, "shape", _as_shape(self.shape))
        self.validate()

    def validate(self, full: bool = False) -> None:
        m, k = self.shape
        check_array(self.indptr, "indptr", ndim=1, dtypes=INDPTR_DTYPES)
        check_array(self.indices, "indices", ndim=1, dtypes=INDEX_DTYPES)
        check_array(self.data, "data", ndim=1)
        _fits(self.indices, "indices", k, "columns")
        if len(self.indices) != len(self.data):
            raise ValueError(f"indices: length should equal len(data) = {len(self.data)}, "
                             f"got {len(self.indices)}")
        _check_indptr(self.indptr, m, len(self.indices), "rows")
        if full:
            self._check_stored_indices()
            check_array(self.data, "data", finite=True)

    def _check_stored_indices(self) -> None:
        _check_indptr_full(self.indptr)
        check_indices(self.indices, "indices", self.shape[1])
        _check_ascending_segments(self.indices, self._rows(), "indices", "row")

    def _index_arrays(self):
        return (self.indptr, self.indices)

    def _rows(self) -> np.ndarray:
        return np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))

    def __repr__(self) -> str:
        return (f"<CSR shape={self.shape} nnz={self.nnz} dtype={self.dtype} "
                f"index={self.indices.dtype}>")

    @classmethod
    def from_dense(cls, dense, mask=None, *, index_dtype=np.int32) -> "CSR":
        """Store the entries of ``dense`` that ``mask`` keeps, row by row.

        Parameters
        ----------
        dense : numpy.ndarray
            2-D float16, float32 or float64 array with finite values.
        mask : numpy.ndarray of bool, optional
            Same shape as ``dense``; True keeps an entry (stored even when it is
            0). Default ``dense != 0``.
        index_dtype : {int16, int32, int64}, default int32
            Dtype of the index arrays (int16 needs every indexed dimension <= 32767).

        Raises
        ------
        TypeError
            ``dense`` is not a float array, ``mask`` not boolean, or a bad ``index_dtype``.
        ValueError
            ``dense`` is not 2-D or holds NaN/Inf, ``mask`` has another shape, or
            ``index_dtype`` cannot index the columns.
        """
        dense, mask = _dense_and_mask(dense, mask)
        idt = _index_dtype(index_dtype, INDEX_DTYPES)
        rows, cols = np.nonzero(mask)
        indptr = np.zeros(dense.shape[0] + 1, dtype=_ptr_dtype(idt, rows.size))
        np.cumsum(np.count_nonzero(mask, axis=1), out=indptr[1:])
        if _too_small(idt, dense.shape[1]):
            raise ValueError(f"index_dtype: {idt} cannot index columns = {dense.shape[1]} "
                             f"(at most {np.iinfo(idt).max}); use int32")
        return cls(indptr, cols.astype(idt), dense[rows, cols], dense.shape)

    def to_dense(self) -> np.ndarray:
        self._check_stored_indices()
        out = np.zeros(self.shape, dtype=self.dtype)
        out[self._rows(), self.indices] = self.data
        return out

    def mask(self) -> np.ndarray:
        self._check_stored_indices()
        out = np.zeros(self.shape, dtype=bool)
        out[self._rows(), self.indices] = True
        return out

    def to_csr(self, *, index_dtype=None) -> "CSR":
        self._check_stored_indices()
        if index_dtype is None or np.dtype(index_dtype) == self.indices.dtype:
            return self
        return super().to_csr(index_dtype=index_dtype)

    @classmethod
    def from_scipy(cls, a, *, dtype=None, index_dtype=None) -> "CSR":
        """From any SciPy sparse matrix/array (duplicates are summed, as SciPy defines them).

        ``dtype`` casts the values (e.g. to float16, which SciPy lacks); ``index_dtype``
        the column indices.
        """
        c, data = _scipy_csr(a, dtype)
        return cls(c.indptr, _from_scipy_index(c.indices, index_dtype), data, c.shape)

    def to_scipy(self, *, dtype=None):
        """A ``scipy.sparse.csr_array`` copy (SciPy has no float16: pass ``dtype=np.float32``)."""
        import scipy.sparse as sp

        self._check_stored_indices()
        return sp.csr_array((_scipy_values(self.data, dtype), self.indices.copy(), self.indptr.copy()),
                            shape=self.shape)


# ---------------------------------------------------------------------------
# COO
# ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False, repr=False)
class COO(_Format):
    """Coordinate format, canonical: sorted row-major, no duplicates.

    Entry ``i`` is ``data[i]`` at ``(row[i], col[i])``.

    >>> import numpy as np
    >>> w = np.array([[0., 5.], [6., 7.]], dtype=np.float64)
    >>> a = COO.from_dense(w, index_dtype=np.int16)
    >>> a
    <COO shape=(2, 2) nnz=3 dtype=float64 index=int16>
    >>> a.row, a.col
    (array([0, 1, 1], dtype=int16), array([1, 0, 1], dtype=int16))
    >>> a.nbytes()
    NBytes(values=24, indices=12, total=36)
    >>> bool((COO.from_scipy(a.to_scipy()).to_dense() == w).all())
    True
    """

    row: np.ndarray
    col: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]

    def __post_init__(self):
        object.__setattr__(self, "shape", _as_shape(self.shape))
        self.validate()

    def validate(self, full: bool = False) -> None:
        m, k = self.shape
        check_array(self.row, "row", ndim=1, dtypes=INDEX_DTYPES)
        check_array(self.col, "col", ndim=1, dtypes=INDEX_DTYPES)
        check_array(self.data, "data", ndim=1)
        _fits(self.row, "row", m, "rows")
        _fits(self.col, "col", k, "columns")
        for name, arr in (("row", self.row), ("col", self.col)):
            if len(arr) != len(self.data):
                raise ValueError(f"{name}: length should equal len(data) = {len(self.data)}, got {len(arr)}")
        if full:
            self._check_stored_indices()
            check_array(self.data, "data", finite=True)

    def _check_stored_indices(self) -> None:
        m, k = self.shape
        check_indices(self.row, "row", m)
        check_indices(self.col, "col", k)
        lin = self.row.astype(np.int64) * k + self.col
        hit = np.flatnonzero(np.diff(lin) <= 0)
        if hit.size:
            i = int(hit[0])
            raise ValueError(f"row, col: entries should be sorted row-major with no duplicates, entry {i} "
                             f"is ({self.row[i]}, {self.col[i]}) and entry {i + 1} is "
                             f"({self.row[i + 1]}, {self.col[i + 1]})")

    def _index_arrays(self):
        return (self.row, self.col)

    def __repr__(self) -> str:
        return f"<COO shape={self.shape} nnz={self.nnz} dtype={self.dtype} index={self.col.dtype}>"

    @classmethod
    def from_dense(cls, dense, mask=None, *, index_dtype=np.int32) -> "COO":
        """Store the entries of ``dense`` that ``mask`` keeps, sorted row-major.

        Parameters
        ----------
        dense, mask : numpy.ndarray
            As in :meth:`CSR.from_dense`: a finite 2-D float array, and an optional
            boolean array of its shape selecting the stored entries (default ``dense != 0``).
        index_dtype : {int16, int32, int64}, default int32
            Dtype of ``row`` and ``col`` (int16 needs both dimensions <= 32767).

        Raises
        ------
        TypeError, ValueError
            As for :meth:`CSR.from_dense`.
        """
        dense, mask = _dense_and_mask(dense, mask)
        idt = _index_dtype(index_dtype, INDEX_DTYPES)
        rows, cols = np.nonzero(mask)
        if _too_small(idt, max(dense.shape)):
            raise ValueError(f"index_dtype: {idt} cannot index shape {dense.shape} "
                             f"(at most {np.iinfo(idt).max}); use int32")
        return cls(rows.astype(idt), cols.astype(idt), dense[rows, cols], dense.shape)

    def to_dense(self) -> np.ndarray:
        self._check_stored_indices()
        out = np.zeros(self.shape, dtype=self.dtype)
        out[self.row, self.col] = self.data
        return out

    def mask(self) -> np.ndarray:
        self._check_stored_indices()
        out = np.zeros(self.shape, dtype=bool)
        out[self.row, self.col] = True
        return out

    @classmethod
    def from_scipy(cls, a, *, dtype=None, index_dtype=None) -> "COO":
        """From any SciPy sparse matrix/array (duplicates summed, entries sorted row-major)."""
        c, data = _scipy_csr(a, dtype)
        row = np.repeat(np.arange(c.shape[0], dtype=c.indices.dtype), np.diff(c.indptr))
        return cls(_from_scipy_index(row, index_dtype), _from_scipy_index(c.indices, index_dtype),
                   data, c.shape)

    def to_scipy(self, *, dtype=None):
        """A ``scipy.sparse.coo_array`` copy (SciPy has no float16: pass ``dtype=np.float32``)."""
        import scipy.sparse as sp

        self._check_stored_indices()
        return sp.coo_array((_scipy_values(self.data, dtype), (self.row.copy(), self.col.copy())),
                            shape=self.shape)


# ---------------------------------------------------------------------------
# ELL (uniform sparsity)
# ---------------------------------------------------------------------------

#: Entries (rows x columns) :meth:`ELL.padded_from_csr` lays out densely at a time.
_PAD_STRIP_ENTRIES = 1 << 22


@dataclass(frozen=True, eq=False, repr=False)
class ELL(_Format):
    """ELLPACK for uniform sparsity: every row stores exactly K' entries.

    ``values`` and ``indices`` are (M, K') arrays in Fortran (column-major)
    order, which is the uniform-sparsity paper's ``ellval``/``ellidx`` layout
    (Section 3, Listing 1 line 26: ``ellval[x*m + crow]``), so
    ``values[row, x] == ellval[x * M + row]``. Column indices ascend within a
    row; they are int16 (needs ``K <= 32767``) or int32. There is no padding:
    uniform sparsity makes every row K' long. A row may hold explicit zeros
    when the mask that built it kept them.

    >>> import numpy as np
    >>> w = np.array([[1., 0., 2., 0.],
    ...               [0., 3., 0., 4.],
    ...               [5., 6., 0., 0.]], dtype=np.float16)
    >>> e = ELL.from_dense(w, index_dtype=np.int16)
    >>> e
    <ELL shape=(3, 4) k'=2 dtype=float16 index=int16>
    >>> e.indices
    array([[0, 2],
           [1, 3],
           [0, 1]], dtype=int16)
    >>> e.ellval          # column-major: column x of values, then column x+1
    array([1., 3., 5., 2., 4., 6.], dtype=float16)
    >>> e.ellidx
    array([0, 1, 0, 2, 3, 1], dtype=int16)
    >>> e.nbytes()
    NBytes(values=12, indices=12, total=24)
    >>> bool((e.to_dense() == w).all())
    True

    Rows that keep different counts are not uniform:

    >>> ELL.from_dense(np.eye(3, dtype=np.float32) + np.eye(3, k=1, dtype=np.float32))
    Traceback (most recent call last):
    ...
    ValueError: mask: ELL needs the same number of kept entries in every row (uniform sparsity); row 0 keeps 2, row 2 keeps 1
    """

    values: np.ndarray
    indices: np.ndarray
    shape: tuple[int, int]

    _values_field = "values"

    def __post_init__(self):
        object.__setattr__(self, "shape", _as_shape(self.shape))
        self.validate()

    @property
    def kprime(self) -> int:
        """K', the number of entries stored in every row."""
        return int(self.values.shape[1])

    @property
    def ellval(self) -> np.ndarray:
        """``values`` as the paper's flat column-major ``ellval`` (a view, length M*K')."""
        return self.values.ravel(order="F")

    @property
    def ellidx(self) -> np.ndarray:
        """``indices`` as the paper's flat column-major ``ellidx`` (a view, length M*K')."""
        return self.indices.ravel(order="F")

    def validate(self, full: bool = False) -> None:
        m, k = self.shape
        check_array(self.values, "values", ndim=2, shape=(m, None))
        check_array(self.indices, "indices", ndim=2, dtypes=ELL_INDEX_DTYPES, shape=self.values.shape)
        if self.kprime > k:
            raise ValueError(f"values: K' should be at most the column count {k}, got {self.kprime}")
        for name, arr in (("values", self.values), ("indices", self.indices)):
            if not arr.flags.f_contiguous:
                raise ValueError(f"{name}: should be Fortran-ordered (column-major, the paper's "
                                 f"ell layout; use np.asfortranarray), got a non-F-contiguous array")
        _fits(self.indices, "indices", k, "columns")
        if full:
            self._check_stored_indices()
            check_array(self.values, "values", finite=True)

    def _check_stored_indices(self) -> None:
        check_indices(self.indices, "indices", self.shape[1])
        _check_ascending_rows(self.indices, "indices", "row")

    def _index_arrays(self):
        return (self.indices,)

    def __repr__(self) -> str:
        return f"<ELL shape={self.shape} k'={self.kprime} dtype={self.dtype} index={self.indices.dtype}>"

    @classmethod
    def from_dense(cls, dense, mask=None, *, index_dtype=np.int32) -> "ELL":
        """Store the kept entries; ``mask`` must keep the same count K' in every row.

        Parameters
        ----------
        dense, mask : numpy.ndarray
            As in :meth:`CSR.from_dense`: a finite 2-D float array, and an optional
            boolean array of its shape selecting the stored entries (default ``dense != 0``).
        index_dtype : {int16, int32}, default int32
            Dtype of ``indices`` (int16 needs ``cols <= 32767``; the paper's
            Section 6 suggests 16-bit ``ellidx``).

        Raises
        ------
        ValueError
            Rows keep different counts (the message names the first such row
            and both counts), or as for :meth:`CSR.from_dense`.
        TypeError
            As for :meth:`CSR.from_dense`.
        """
        dense, mask = _dense_and_mask(dense, mask)
        idt = _index_dtype(index_dtype, ELL_INDEX_DTYPES)
        m, k = dense.shape
        counts = np.count_nonzero(mask, axis=1)
        kprime = int(counts[0]) if m else 0
        off = np.flatnonzero(counts != kprime)
        if off.size:
            r = int(off[0])
            raise ValueError(f"mask: ELL needs the same number of kept entries in every row (uniform "
                             f"sparsity); row 0 keeps {kprime}, row {r} keeps {int(counts[r])}")
        if _too_small(idt, k):
            raise ValueError(f"index_dtype: {idt} cannot index columns = {k} "
                             f"(at most {np.iinfo(idt).max}); use int32")
        rows, cols = np.nonzero(mask)
        values = np.asfortranarray(dense[rows, cols].reshape(m, kprime))
        indices = np.asfortranarray(cols.astype(idt).reshape(m, kprime))
        return cls(values, indices, (m, k))

    def to_dense(self) -> np.ndarray:
        self._check_stored_indices()
        out = np.zeros(self.shape, dtype=self.dtype)
        out[np.arange(self.shape[0])[:, None], self.indices] = self.values
        return out

    def mask(self) -> np.ndarray:
        self._check_stored_indices()
        out = np.zeros(self.shape, dtype=bool)
        out[np.arange(self.shape[0])[:, None], self.indices] = True
        return out

    @classmethod
    def padded_from_csr(cls, csr: "CSR", *, index_dtype=None) -> "ELL":
        """Any CSR as ELL: every row padded to the longest with explicit zeros, at the lowest columns the row
        leaves free (so columns still ascend and never repeat). The product is the CSR's for every right-hand
        side; the padding is what the uniform kernels then also read (``kprime * M - nnz`` zeros).

        >>> import numpy as np
        >>> e = ELL.padded_from_csr(CSR.from_dense(np.array([[0., 2., 3.], [4., 0., 0.]], dtype=np.float32)))
        >>> e.indices, e.values
        (array([[1, 2],
               [0, 1]], dtype=int16), array([[2., 3.],
               [4., 0.]], dtype=float32))
        """
        if not isinstance(csr, CSR):
            raise TypeError(f"csr: expected a CSR, got {type(csr).__name__}")
        csr.validate(full=True)                                  # the layout below indexes with its columns
        m, k = csr.shape
        idt = np.dtype(np.int16 if k <= np.iinfo(np.int16).max else np.int32) if index_dtype is None \
            else _index_dtype(index_dtype, ELL_INDEX_DTYPES)
        counts = np.diff(csr.indptr.astype(np.int64))
        width = int(counts.max()) if m else 0
        values = np.zeros((m, width), dtype=csr.data.dtype, order="F")
        indices = np.zeros((m, width), dtype=idt, order="F")
        strip = max(1, _PAD_STRIP_ENTRIES // max(k, 1))
        for r0 in range(0, m, strip):                        # a strip of rows at a time (about 10 bytes an entry)
            r1 = min(m, r0 + strip)
            lo, hi = int(csr.indptr[r0]), int(csr.indptr[r1])
            rows = np.repeat(np.arange(r1 - r0), counts[r0:r1])
            kept = np.zeros((r1 - r0, k), dtype=bool)
            kept[rows, csr.indices[lo:hi]] = True
            free = ~kept
            pad = free & (np.cumsum(free, axis=1, dtype=np.int32) <= (width - counts[r0:r1])[:, None])
            dense = np.zeros((r1 - r0, k), dtype=csr.data.dtype)
            dense[rows, csr.indices[lo:hi]] = csr.data[lo:hi]
            stored = kept | pad                                  # width entries in every row, in column order
            _, cols = np.nonzero(stored)
            values[r0:r1] = dense[stored].reshape(r1 - r0, width)
            indices[r0:r1] = cols.astype(idt).reshape(r1 - r0, width)
        return cls(values, indices, (m, k))

    def to_csr(self, *, index_dtype=None) -> CSR:
        self._check_stored_indices()
        idt = self.indices.dtype if index_dtype is None else _index_dtype(index_dtype, INDEX_DTYPES)
        m, kp = self.values.shape
        indptr = (np.arange(m + 1, dtype=_ptr_dtype(idt, m * kp)) * kp)
        return CSR(indptr, self.indices.ravel(order="C").astype(idt),
                   self.values.ravel(order="C").copy(), self.shape)


# ---------------------------------------------------------------------------
# BlockedELL (blocked-uniform sparsity)
# ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False, repr=False)
class BlockedELL(_Format):
    """Blocked ELL for blocked-uniform sparsity: square ``block x block`` tiles.

    Block row ``i`` (rows ``i*b .. i*b+b-1``) stores ``Kb`` dense tiles
    ``values[i, j]`` (shape ``(b, b)``) at block columns ``indices[i, j]``
    (ascending). Every block row keeps the same number ``Kb`` of blocks.
    ``values`` is (M/b, Kb, b, b), ``indices`` (M/b, Kb) int16 or int32.
    Every entry of a kept block is stored, so ``nnz == M/b * Kb * b * b``.

    >>> import numpy as np
    >>> w = np.zeros((4, 6), dtype=np.float32)
    >>> w[0:2, 2:4] = 1.0
    >>> w[2:4, 0:2] = 2.0
    >>> w[3, 4] = 3.0
    >>> mask = w != 0
    >>> mask[0:2, 4:6] = True          # keep one more block in block row 0 (explicit zeros)
    >>> b = BlockedELL.from_dense(w, mask, block=2)
    >>> b
    <BlockedELL shape=(4, 6) block=2 kb=2 dtype=float32 index=int32>
    >>> b.indices
    array([[1, 2],
           [0, 2]], dtype=int32)
    >>> b.nnz, b.nbytes()
    (16, NBytes(values=64, indices=16, total=80))
    >>> bool((b.to_dense() == w).all())
    True
    """

    values: np.ndarray
    indices: np.ndarray
    shape: tuple[int, int]
    block: int

    _values_field = "values"

    def __post_init__(self):
        object.__setattr__(self, "shape", _as_shape(self.shape))
        object.__setattr__(self, "block", check_int(self.block, "block", minimum=1))
        self.validate()

    @property
    def kb(self) -> int:
        """Blocks stored in every block row."""
        return int(self.indices.shape[1])

    def validate(self, full: bool = False) -> None:
        m, k = self.shape
        b = check_int(self.block, "block", minimum=1)
        check_divisible(m, b, "shape[0]")
        check_divisible(k, b, "shape[1]")
        check_array(self.indices, "indices", ndim=2, dtypes=ELL_INDEX_DTYPES, shape=(m // b, None))
        check_array(self.values, "values", ndim=4, shape=(m // b, self.kb, b, b))
        if self.kb > k // b:
            raise ValueError(f"indices: blocks per block row should be at most {k // b} "
                             f"(shape[1] / block), got {self.kb}")
        _fits(self.indices, "indices", k // b, "block columns")
        if full:
            self._check_stored_indices()
            check_array(self.values, "values", finite=True)

    def _check_stored_indices(self) -> None:
        check_indices(self.indices, "indices", self.shape[1] // self.block)
        _check_ascending_rows(self.indices, "indices", "block row")

    def _index_arrays(self):
        return (self.indices,)

    def __repr__(self) -> str:
        return (f"<BlockedELL shape={self.shape} block={self.block} kb={self.kb} dtype={self.dtype} "
                f"index={self.indices.dtype}>")

    @classmethod
    def from_dense(cls, dense, mask=None, *, block, index_dtype=np.int32) -> "BlockedELL":
        """Keep every ``block x block`` tile holding a kept entry.

        Entries of a kept tile that the mask drops are stored as zeros.

        Parameters
        ----------
        dense, mask : numpy.ndarray
            As in :meth:`CSR.from_dense`: a finite 2-D float array, and an optional
            boolean array of its shape selecting the stored entries (default ``dense != 0``).
        block : int
            Tile side ``b``; must divide both dimensions.
        index_dtype : {int16, int32}, default int32
            Dtype of the block-column ``indices``.

        Raises
        ------
        ValueError
            ``block`` does not divide the shape, block rows keep different
            numbers of tiles (the message names the first such block row), or
            as for :meth:`CSR.from_dense`.
        TypeError
            As for :meth:`CSR.from_dense`.
        """
        dense, mask = _dense_and_mask(dense, mask)
        b = check_int(block, "block", minimum=1)
        idt = _index_dtype(index_dtype, ELL_INDEX_DTYPES)
        m, k = dense.shape
        check_divisible(m, b, "dense.shape[0]")
        check_divisible(k, b, "dense.shape[1]")
        bmask = _tiles(mask, b, b).any(axis=(2, 3))
        counts = np.count_nonzero(bmask, axis=1)
        kb = int(counts[0]) if counts.size else 0
        off = np.flatnonzero(counts != kb)
        if off.size:
            r = int(off[0])
            raise ValueError(f"mask: BlockedELL needs the same number of kept blocks in every block row; "
                             f"block row 0 keeps {kb}, block row {r} keeps {int(counts[r])}")
        if _too_small(idt, k // b):
            raise ValueError(f"index_dtype: {idt} cannot index {k // b} block columns; use int32")
        rows, cols = np.nonzero(bmask)
        tiles = _tiles(np.where(mask, dense, np.zeros((), dense.dtype)), b, b)
        values = np.ascontiguousarray(tiles[rows, cols].reshape(m // b, kb, b, b))
        return cls(values, cols.astype(idt).reshape(m // b, kb), (m, k), b)

    def to_dense(self) -> np.ndarray:
        self._check_stored_indices()
        out = np.zeros(self.shape, dtype=self.dtype)
        _tiles(out, self.block, self.block)[np.arange(self.indices.shape[0])[:, None], self.indices] = self.values
        return out

    def mask(self) -> np.ndarray:
        self._check_stored_indices()
        out = np.zeros(self.shape, dtype=bool)
        _tiles(out, self.block, self.block)[np.arange(self.indices.shape[0])[:, None], self.indices] = True
        return out


def _tiles(a: np.ndarray, br: int, bc: int) -> np.ndarray:
    """View of the C-contiguous (M, K) ``a`` as (M/br, K/bc, br, bc) tiles (writable view)."""
    m, k = a.shape
    return a.reshape(m // br, br, k // bc, bc).transpose(0, 2, 1, 3)


# ---------------------------------------------------------------------------
# NM (N:M semi-structured)
# ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False, repr=False)
class NM(_Format):
    """N:M compressed: each group of ``m`` consecutive columns of a row stores ``n`` values.

    ``values`` is (M, K/m*n); ``positions`` (same shape, uint8) holds each
    value's offset in its group, ascending within the group. Group ``g`` of
    row ``r`` is ``values[r, g*n:(g+1)*n]`` at columns ``g*m + positions[...]``.
    A group that keeps fewer than ``n`` entries is padded with explicit zeros
    at its lowest unused positions, so ``nnz == M * K / m * n`` always.
    ``nbytes()`` counts positions as the hardware metadata, ``ceil(log2(m))``
    bits each (2 for 2:4); ``nbytes(packed=False)`` counts the uint8 array.

    >>> import numpy as np
    >>> w = np.array([[1., 0., 0., 2., 0., 0., 0., 3.]], dtype=np.float16)
    >>> a = NM.from_dense(w, n=2, m=4)
    >>> a
    <NM shape=(1, 8) n:m=2:4 dtype=float16 positions=uint8>
    >>> a.values, a.positions          # group 1 keeps one entry: padded at position 0
    (array([[1., 2., 0., 3.]], dtype=float16), array([[0, 3, 0, 3]], dtype=uint8))
    >>> a.nbytes()                     # 4 values x 2 bytes; 4 positions x 2 bits = 1 byte
    NBytes(values=8, indices=1, total=9)
    >>> bool((a.to_dense() == w).all())
    True
    """

    values: np.ndarray
    positions: np.ndarray
    shape: tuple[int, int]
    n: int
    m: int

    _values_field = "values"

    def __post_init__(self):
        object.__setattr__(self, "shape", _as_shape(self.shape))
        n, m = _check_nm(self.n, self.m)
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "m", m)
        self.validate()

    def validate(self, full: bool = False) -> None:
        rows, k = self.shape
        n, m = _check_nm(self.n, self.m)
        check_divisible(k, m, "shape[1]")
        width = k // m * n
        check_array(self.values, "values", ndim=2, shape=(rows, width))
        check_array(self.positions, "positions", ndim=2, dtypes=(np.uint8,), shape=(rows, width))
        if full:
            self._check_stored_indices()
            check_array(self.values, "values", finite=True)

    def _check_stored_indices(self) -> None:
        rows, k = self.shape
        n, m = self.n, self.m
        if self.positions.size and int(self.positions.max()) >= m:
            raise ValueError(f"positions: must lie in [0, m) = [0, {m}), found {int(self.positions.max())}")
        grouped = self.positions.reshape(rows * (k // m), n)
        bad = np.argwhere(np.diff(grouped.astype(np.int16), axis=1) <= 0)
        if bad.size:
            gi, c = (int(v) for v in bad[0])
            r, g = divmod(gi, k // m)
            raise ValueError(f"positions: should be strictly increasing within each group (sorted, no "
                             f"duplicates), row {r} group {g} has {grouped[gi, c]} then {grouped[gi, c + 1]}")

    def _index_arrays(self):
        return (self.positions,)

    def nbytes(self, *, packed: bool = True) -> NBytes:
        """Value bytes and position bytes.

        Parameters
        ----------
        packed : bool, default True
            True counts each position as the hardware metadata does,
            ``ceil(log2(m))`` bits (2 for 2:4), the matrix total rounded up to
            whole bytes; False counts the uint8 ``positions`` array as stored.
        """
        v = int(self.values.nbytes)
        if packed:
            i = -(-self.positions.size * (self.m - 1).bit_length() // 8)
        else:
            i = int(self.positions.nbytes)
        return NBytes(v, i, v + i)

    def __repr__(self) -> str:
        return f"<NM shape={self.shape} n:m={self.n}:{self.m} dtype={self.dtype} positions=uint8>"

    def _columns(self) -> np.ndarray:
        rows, k = self.shape
        groups = k // self.m
        base = (np.arange(groups) * self.m)[None, :, None]
        return (base + self.positions.reshape(rows, groups, self.n)).reshape(rows, groups * self.n)

    @classmethod
    def from_dense(cls, dense, mask=None, *, n, m) -> "NM":
        """Store the kept entries of every group of ``m`` consecutive columns in a row.

        A group keeping fewer than ``n`` entries is padded with zeros at its
        lowest unused positions.

        Parameters
        ----------
        dense, mask : numpy.ndarray
            As in :meth:`CSR.from_dense`: a finite 2-D float array, and an optional
            boolean array of its shape selecting the stored entries (default ``dense != 0``).
        n, m : int
            Keep at most ``n`` of every ``m`` (``1 <= n <= m <= 256``); ``m``
            must divide the column count.

        Raises
        ------
        ValueError
            ``n > m``, ``m`` does not divide the columns, a group keeps more
            than ``n`` (the message names the first row and group), or as for
            :meth:`CSR.from_dense`.
        TypeError
            As for :meth:`CSR.from_dense`.
        """
        dense, mask = _dense_and_mask(dense, mask)
        n, m = _check_nm(n, m)
        rows, k = dense.shape
        check_divisible(k, m, "dense.shape[1]")
        groups = k // m
        g = mask.reshape(rows, groups, m)
        counts = np.count_nonzero(g, axis=2)
        over = np.argwhere(counts > n)
        if over.size:
            r, gi = (int(v) for v in over[0])
            raise ValueError(f"mask: {n}:{m} allows at most {n} kept entries in each group of {m} columns; "
                             f"row {r} group {gi} (columns {gi * m}-{gi * m + m - 1}) keeps {int(counts[r, gi])}")
        # kept positions first, then the lowest unused ones as zero padding; ascending within the group
        pos = np.sort(np.argsort(~g, axis=2, kind="stable")[:, :, :n], axis=2)
        kept = np.where(mask, dense, np.zeros((), dense.dtype)).reshape(rows, groups, m)
        values = np.take_along_axis(kept, pos, axis=2).reshape(rows, groups * n)
        return cls(values, pos.astype(np.uint8).reshape(rows, groups * n), (rows, k), n, m)

    def to_dense(self) -> np.ndarray:
        self._check_stored_indices()
        out = np.zeros(self.shape, dtype=self.dtype)
        out[np.arange(self.shape[0])[:, None], self._columns()] = self.values
        return out

    def mask(self) -> np.ndarray:
        self._check_stored_indices()
        out = np.zeros(self.shape, dtype=bool)
        out[np.arange(self.shape[0])[:, None], self._columns()] = True
        return out


def _check_nm(n, m) -> tuple[int, int]:
    m = check_int(m, "m", minimum=1, maximum=256)  # positions are uint8
    n = check_int(n, "n", minimum=1)
    if n > m:
        raise ValueError(f"n: must be <= m ({m}), got {n}")
    return n, m


# ---------------------------------------------------------------------------
# BSR
# ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False, repr=False)
class BSR(_Format):
    """Block sparse rows, SciPy-compatible: CSR over ``blocksize = (br, bc)`` dense tiles.

    Block row ``i`` stores tiles ``data[indptr[i]:indptr[i+1]]`` (each
    ``(br, bc)``) at block columns ``indices[indptr[i]:indptr[i+1]]``
    (ascending). Every entry of a stored tile counts in ``nnz``.

    >>> import numpy as np
    >>> w = np.zeros((4, 4), dtype=np.float32)
    >>> w[0, 1], w[3, 2] = 1.0, 2.0
    >>> a = BSR.from_dense(w, blocksize=(2, 2))
    >>> a
    <BSR shape=(4, 4) blocksize=(2, 2) nnzb=2 dtype=float32 index=int32>
    >>> a.indptr, a.indices, a.nnz
    (array([0, 1, 2], dtype=int32), array([0, 1], dtype=int32), 8)
    >>> a.nbytes()
    NBytes(values=32, indices=20, total=52)
    >>> bool((BSR.from_scipy(a.to_scipy()).to_dense() == w).all())
    True
    """

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]
    blocksize: tuple[int, int]

    def __post_init__(self):
        object.__setattr__(self, "shape", _as_shape(self.shape))
        object.__setattr__(self, "blocksize", _as_blocksize(self.blocksize))
        self.validate()

    @property
    def nnzb(self) -> int:
        """Stored blocks."""
        return int(self.indices.size)

    def validate(self, full: bool = False) -> None:
        m, k = self.shape
        br, bc = _as_blocksize(self.blocksize)
        check_divisible(m, br, "shape[0]")
        check_divisible(k, bc, "shape[1]")
        check_array(self.indptr, "indptr", ndim=1, dtypes=INDPTR_DTYPES)
        check_array(self.indices, "indices", ndim=1, dtypes=INDEX_DTYPES)
        check_array(self.data, "data", ndim=3, shape=(len(self.indices), br, bc))
        _fits(self.indices, "indices", k // bc, "block columns")
        _check_indptr(self.indptr, m // br, len(self.indices), "block rows")
        if full:
            self._check_stored_indices()
            check_array(self.data, "data", finite=True)

    def _check_stored_indices(self) -> None:
        _check_indptr_full(self.indptr)
        check_indices(self.indices, "indices", self.shape[1] // self.blocksize[1])
        _check_ascending_segments(self.indices, self._block_rows(), "indices", "block row")

    def _index_arrays(self):
        return (self.indptr, self.indices)

    def __repr__(self) -> str:
        return (f"<BSR shape={self.shape} blocksize={self.blocksize} nnzb={self.nnzb} "
                f"dtype={self.dtype} index={self.indices.dtype}>")

    @classmethod
    def from_dense(cls, dense, mask=None, *, blocksize, index_dtype=np.int32) -> "BSR":
        """Keep every ``blocksize`` tile holding a kept entry.

        Entries of a kept tile that the mask drops are stored as zeros.

        Parameters
        ----------
        dense, mask : numpy.ndarray
            As in :meth:`CSR.from_dense`: a finite 2-D float array, and an optional
            boolean array of its shape selecting the stored entries (default ``dense != 0``).
        blocksize : tuple of int
            ``(br, bc)``; must divide the shape.
        index_dtype : {int16, int32, int64}, default int32
            Dtype of the block-column ``indices``.

        Raises
        ------
        ValueError
            ``blocksize`` does not divide the shape, or as for :meth:`CSR.from_dense`.
        TypeError
            As for :meth:`CSR.from_dense`.
        """
        dense, mask = _dense_and_mask(dense, mask)
        br, bc = _as_blocksize(blocksize)
        idt = _index_dtype(index_dtype, INDEX_DTYPES)
        m, k = dense.shape
        check_divisible(m, br, "dense.shape[0]")
        check_divisible(k, bc, "dense.shape[1]")
        if _too_small(idt, k // bc):
            raise ValueError(f"index_dtype: {idt} cannot index {k // bc} block columns; use int32")
        bmask = _tiles(mask, br, bc).any(axis=(2, 3))
        rows, cols = np.nonzero(bmask)
        indptr = np.zeros(m // br + 1, dtype=_ptr_dtype(idt, rows.size))
        np.cumsum(np.count_nonzero(bmask, axis=1), out=indptr[1:])
        data = _tiles(np.where(mask, dense, np.zeros((), dense.dtype)), br, bc)[rows, cols]
        return cls(indptr, cols.astype(idt), np.ascontiguousarray(data), (m, k), (br, bc))

    def _block_rows(self) -> np.ndarray:
        return np.repeat(np.arange(self.shape[0] // self.blocksize[0]), np.diff(self.indptr))

    def to_dense(self) -> np.ndarray:
        self._check_stored_indices()
        out = np.zeros(self.shape, dtype=self.dtype)
        _tiles(out, *self.blocksize)[self._block_rows(), self.indices] = self.data
        return out

    def mask(self) -> np.ndarray:
        self._check_stored_indices()
        out = np.zeros(self.shape, dtype=bool)
        _tiles(out, *self.blocksize)[self._block_rows(), self.indices] = True
        return out

    @classmethod
    def from_scipy(cls, a, *, blocksize=None, dtype=None, index_dtype=None) -> "BSR":
        """From any SciPy sparse matrix/array; ``blocksize`` defaults to ``a``'s own for BSR input."""
        import scipy.sparse as sp

        if not sp.issparse(a):
            raise TypeError(f"a: expected a scipy.sparse array or matrix, got {type(a).__name__}")
        if blocksize is None:
            blocksize = a.blocksize if a.format == "bsr" else (1, 1)
        br, bc = _as_blocksize(blocksize)
        check_divisible(a.shape[0], br, "a.shape[0]")
        check_divisible(a.shape[1], bc, "a.shape[1]")
        c = a.tobsr(blocksize=(br, bc), copy=True)
        c.sum_duplicates()
        return cls(c.indptr, _from_scipy_index(c.indices, index_dtype), _scipy_data(c.data, dtype), c.shape,
                   (br, bc))

    def to_scipy(self, *, dtype=None):
        """A ``scipy.sparse.bsr_array`` copy (SciPy has no float16: pass ``dtype=np.float32``)."""
        import scipy.sparse as sp

        self._check_stored_indices()
        return sp.bsr_array((_scipy_values(self.data, dtype), self.indices.copy(), self.indptr.copy()),
                            shape=self.shape, blocksize=self.blocksize)


# ---------------------------------------------------------------------------
# TiledCSL (tile-local compressed list: memory-bound half-precision SpMM)
# ---------------------------------------------------------------------------

#: Value dtypes TiledCSL stores (16-bit: a value and its tile-local index fill one 32-bit word).
TILED_VALUE_DTYPES = ("float16", "bfloat16")


def _half_dtype(dtype, name: str) -> np.dtype:
    """``dtype`` as float16 or bfloat16 (``ml_dtypes.bfloat16``), else a TypeError naming ``name``."""
    d = np.dtype(dtype)
    if d.name not in TILED_VALUE_DTYPES or d.itemsize != 2:
        raise TypeError(f"{name}: dtype must be float16 or bfloat16, got {d}")
    return d


class _HalfFormat(_Format):
    """A format whose 16-bit values (float16 or bfloat16) sit in 32-bit words with their index data, so the value
    dtype is a field of its own: ``value_dtype``."""

    def __post_init__(self):
        object.__setattr__(self, "shape", _as_shape(self.shape))
        object.__setattr__(self, "value_dtype", _half_dtype(self.value_dtype, "value_dtype"))
        self.validate()

    @property
    def dtype(self) -> np.dtype:
        return self.value_dtype

    @staticmethod
    def _entries(rows, cols, values, shape):
        """``(rows, cols, values, dtype)`` of ``from_coords``' entries, checked: 1-D of one length, int64
        positions inside ``shape``, finite float16/bfloat16 values."""
        values = np.asarray(values)
        d = _half_dtype(values.dtype, "values")
        check_array(values, "values", ndim=1, dtypes=None, finite=True)
        rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
        for name, a in (("rows", rows), ("cols", cols)):
            check_array(a, name, ndim=1, dtypes=None, shape=values.shape)
        if rows.size and (rows.min() < 0 or cols.min() < 0 or rows.max() >= shape[0] or cols.max() >= shape[1]):
            raise ValueError(f"rows, cols: entries must lie inside the {shape} matrix")
        return rows, cols, values, d


@dataclass(frozen=True, eq=False, repr=False)
class TiledCSL(_HalfFormat):
    """Tile-local compressed list: the weight cut into ``tile = (TM, TK)`` tiles, each tile's stored
    entries one 32-bit word apiece.

    The design of Flash-LLM's "tiled CSL" (VLDB 2024): a kernel streams one tile's words, scatters
    them into a zeroed TM x TK tile in shared memory and multiplies that tile densely on tensor cores
    ("load as sparse, compute as dense"). Word ``w`` holds the value's 16 bits (float16 or bfloat16)
    in its low half and the local index ``(row % TM) * TK + col % TK`` in its high half. Tiles are
    stored row of tiles by row of tiles (tile ``(i, j)`` is number ``i * ceil(K / TK) + j``), entries
    in ascending local index, and each tile padded to a multiple of four words (one 16-byte copy) with
    *sink* words, local index ``TM * TK`` and value 0, which a kernel writes past the tile.
    ``offsets[t]`` is the first word of tile ``t``; ``offsets[-1] == words.size``.

    4 bytes a stored entry plus padding: against 2 bytes a weight dense, the bandwidth ceiling at
    sparsity ``s`` is about ``0.5 / (1 - s)`` over dense. Any pattern fits (uniform or not).

    >>> import numpy as np
    >>> w = np.array([[1., 0., 2., 0.],
    ...               [0., 3., 0., 0.],
    ...               [0., 0., 0., 4.]], dtype=np.float16)
    >>> t = TiledCSL.from_dense(w, tile=(2, 2))
    >>> t
    <TiledCSL shape=(3, 4) tile=(2, 2) nnz=4 dtype=float16 words=12>
    >>> [int(x) for x in t.offsets]          # tiles (0,0), (0,1), (1,0) (empty), (1,1): padded to 4
    [0, 4, 8, 8, 12]
    >>> hex(int(t.words[0]))                 # 1.0 (0x3c00) at local index 0
    '0x3c00'
    >>> bool((t.to_dense() == w).all())
    True
    """

    words: np.ndarray
    offsets: np.ndarray
    shape: tuple[int, int]
    tile: tuple[int, int]
    value_dtype: np.dtype

    def __post_init__(self):
        object.__setattr__(self, "tile", _as_blocksize(self.tile, "tile"))
        super().__post_init__()

    @property
    def sink(self) -> int:
        """The local index of padding words (one past the tile)."""
        return self.tile[0] * self.tile[1]

    @property
    def grid(self) -> tuple[int, int]:
        """Tiles down and across: ``(ceil(M / TM), ceil(K / TK))``."""
        (m, k), (tm, tk) = self.shape, self.tile
        return -(-m // tm), -(-k // tk)

    @property
    def nnz(self) -> int:
        return int(np.count_nonzero((self.words >> np.uint32(16)) != self.sink))

    def validate(self, full: bool = False) -> None:
        tm, tk = self.tile
        if tm * tk >= 1 << 16:
            raise ValueError(f"tile: TM * TK must be below 65536 (a 16-bit local index and the sink), "
                             f"got {tm} * {tk} = {tm * tk}")
        check_array(self.words, "words", ndim=1, dtypes=(np.uint32,))
        check_array(self.offsets, "offsets", ndim=1, dtypes=(np.int64,), shape=(self.grid[0] * self.grid[1] + 1,))
        off = self.offsets
        if off[0] != 0 or off[-1] != self.words.size:
            raise ValueError(f"offsets: should start at 0 and end at words.size = {self.words.size}, "
                             f"got {int(off[0])} and {int(off[-1])}")
        if not full:
            return
        self._check_stored_indices()
        vals = (self.words[self._stored()] & np.uint32(0xFFFF)).astype(np.uint16).view(self.value_dtype)
        if vals.size and not np.isfinite(vals.astype(np.float32)).all():
            raise ValueError("words: values must be finite")

    def _check_stored_indices(self) -> None:
        self.validate()             # the cheap checks too: an edited offsets array may no longer span the words
        tm, tk = self.tile
        off = self.offsets
        steps = np.diff(off)
        if (steps < 0).any() or (off % 4).any():
            t = int(np.flatnonzero((steps < 0) | (off[1:] % 4 != 0))[0])
            raise ValueError(f"offsets: should ascend in multiples of 4 words, tile {t} starts at "
                             f"{int(off[t])} and ends at {int(off[t + 1])}")
        rows, cols, tiles, local = self._coords()
        if rows.size and (rows.max() >= self.shape[0] or cols.max() >= self.shape[1]):
            raise ValueError(f"words: an entry lies outside the {self.shape} matrix (its tile is cut "
                             f"by the edge)")
        key = tiles * (tm * tk + 1) + local
        if key.size and (np.diff(key) <= 0).any():
            raise ValueError("words: local indices should ascend within each tile, without repeats")

    def _stored(self) -> np.ndarray:
        """Boolean mask of the words that are entries (not padding)."""
        local = self.words >> np.uint32(16)
        bad = local > self.sink
        if bad.any():
            raise ValueError(f"words: local index {int(local[bad][0])} exceeds the tile's "
                             f"{self.tile[0]} * {self.tile[1]} = {self.sink} (the sink)")
        return local != self.sink

    def _coords(self):
        """Row, column, tile number and local index of every stored entry, in storage order."""
        (tm, tk), (_, kt) = self.tile, self.grid
        tile_of = np.repeat(np.arange(self.offsets.size - 1), np.diff(self.offsets))
        keep = self._stored()
        local = (self.words[keep] >> np.uint32(16)).astype(np.int64)
        tiles = tile_of[keep]
        rows = tiles // kt * tm + local // tk
        cols = tiles % kt * tk + local % tk
        return rows, cols, tiles, local

    def _index_arrays(self):
        return (self.offsets,)

    def nbytes(self) -> NBytes:
        """Values are half of each word, indices the other half plus ``offsets``."""
        v = 2 * int(self.words.size)
        i = v + int(self.offsets.nbytes)
        return NBytes(v, i, v + i)

    def __repr__(self) -> str:
        return (f"<TiledCSL shape={self.shape} tile={self.tile} nnz={self.nnz} dtype={self.dtype} "
                f"words={self.words.size}>")

    @classmethod
    def from_coords(cls, rows, cols, values, shape, *, tile=(64, 64)) -> "TiledCSL":
        """From entries ``values[i]`` at ``(rows[i], cols[i])`` (distinct positions, any order)."""
        shape = _as_shape(shape)
        tm, tk = _as_blocksize(tile, "tile")
        rows, cols, values, d = cls._entries(rows, cols, values, shape)
        kt = -(-shape[1] // tk)
        ntiles = -(-shape[0] // tm) * kt
        tiles = rows // tm * kt + cols // tk
        local = rows % tm * tk + cols % tk
        key = tiles * (tm * tk) + local                               # storage order: tile, then local index
        steps = np.diff(key)
        if (steps > 0).all():                                          # already in order (row tiles of a CSR)
            order = np.arange(key.size)
        else:
            order = np.argsort(key, kind="stable")
            if (np.diff(key[order]) == 0).any():
                raise ValueError("rows, cols: a position is given twice")
            tiles, local = tiles[order], local[order]
        counts = np.bincount(tiles, minlength=ntiles)
        padded = -(-counts // 4) * 4
        offsets = np.zeros(ntiles + 1, dtype=np.int64)
        np.cumsum(padded, out=offsets[1:])
        words = np.full(int(offsets[-1]), np.uint32(tm * tk) << np.uint32(16), dtype=np.uint32)
        start = np.zeros(ntiles + 1, dtype=np.int64)
        np.cumsum(counts, out=start[1:])
        at = offsets[tiles] + np.arange(tiles.size) - start[tiles]
        bits = values.view(np.uint16)[order].astype(np.uint32)
        words[at] = (local.astype(np.uint32) << np.uint32(16)) | bits
        return cls(words, offsets, shape, (tm, tk), d)

    @classmethod
    def from_dense(cls, dense, mask=None, *, tile=(64, 64)) -> "TiledCSL":
        """Store the entries of a float16/bfloat16 ``dense`` that ``mask`` keeps (default ``dense != 0``)."""
        dense = check_array(dense, "dense", ndim=2, dtypes=None, finite=True)
        _half_dtype(dense.dtype, "dense")
        mask = dense != 0 if mask is None else check_array(mask, "mask", dtypes=(np.bool_,), shape=dense.shape)
        rows, cols = np.nonzero(mask)
        return cls.from_coords(rows, cols, dense[rows, cols], dense.shape, tile=tile)

    @staticmethod
    def row_tile(cols: int) -> tuple[int, int]:
        """The tile ``(1, TK)`` that holds a whole row of ``cols`` columns (``TK`` a power of two): the
        layout of the row kernel of ``sparsekit/gpu/spmm_tiled.py``."""
        return 1, 1 << max(check_int(cols, "cols", minimum=0) - 1, 1).bit_length()

    @classmethod
    def from_ell(cls, ell, *, tile=None) -> "TiledCSL":
        """The entries of a float16/bfloat16 :class:`ELL` (default tile: :meth:`row_tile`)."""
        if not isinstance(ell, ELL):
            raise TypeError(f"ell: expected an ELL, got {type(ell).__name__}")
        m, kp = ell.values.shape
        tile = cls.row_tile(ell.shape[1]) if tile is None else tile
        return cls.from_coords(np.repeat(np.arange(m), kp), ell.indices.ravel(), ell.values.ravel(), ell.shape,
                               tile=tile)

    @classmethod
    def from_csr(cls, csr, *, tile=(64, 64)) -> "TiledCSL":
        """The entries of a :class:`CSR` (or any format with ``to_csr``) of float16/bfloat16 values."""
        if not isinstance(csr, _Format):
            raise TypeError(f"csr: expected a CSR (or another sparsekit format), got {type(csr).__name__}")
        c = csr if isinstance(csr, CSR) else csr.to_csr()
        rows = np.repeat(np.arange(c.shape[0]), np.diff(c.indptr))
        return cls.from_coords(rows, c.indices, c.data, c.shape, tile=tile)

    def to_dense(self) -> np.ndarray:
        self._check_stored_indices()
        rows, cols, _, _ = self._coords()
        out = np.zeros(self.shape, dtype=self.dtype)
        bits = (self.words[self._stored()] & np.uint32(0xFFFF)).astype(np.uint16)
        out[rows, cols] = bits.view(self.dtype)
        return out

    def mask(self) -> np.ndarray:
        self._check_stored_indices()
        rows, cols, _, _ = self._coords()
        out = np.zeros(self.shape, dtype=bool)
        out[rows, cols] = True
        return out


# ---------------------------------------------------------------------------
# TiledBitmap (a bitmap per 8 x 8 cell: unstructured half-precision weights, tensor-core decode)
# ---------------------------------------------------------------------------

#: Entries of the padded 16-bit block a TiledBitmap constructor fills at once (a strip of rows, all columns): 32 MB.
_BITMAP_STRIP_ENTRIES = 1 << 24


@dataclass(frozen=True, eq=False, repr=False)
class TiledBitmap(_HalfFormat):
    """A bitmap per 8 x 8 cell, a bit per pair of adjacent weights (one tensor-core register), and the pairs it
    marks, grouped by 16 x 16 MMA fragment.

    After SpInfer's tensor-core-aware bitmaps (EuroSys 2025), at the granularity of the MMA's registers: lane
    ``l`` of a warp holds, of each 8 x 8 cell of an ``mma.m16n8k16`` A fragment, one 32-bit register (two
    weights of a row), so a cell's bitmap is 32 bits, bit ``l`` for lane ``l``'s pair, and the cell's stored
    words are the pairs with a kept weight. A lane decodes its register with a popcount of the bits below
    its own, one 32-bit load and a select: no shared-memory scatter, no assembly of halves. Bytes: 4 a
    stored pair plus 16 a 256-weight fragment (its bitmaps) and the padding to 16 bytes; a pair is stored
    when either weight is kept (``1 - s^2`` of them at sparsity ``s``): with ``offsets``, 0.81 of dense 16-bit
    storage at 50 %, 0.57 at 70 %, 0.42 at 80 %, 0.25 at 90 %. Any pattern fits.

    Layout. Fragment ``(rb, ks)`` covers rows ``16 rb .. 16 rb + 15`` and step ``ks`` of ``K`` padded to a
    multiple of 32; fragments are numbered ``f = rb * ksteps + ks`` (``ksteps = 2 ceil(K / 32)``). Within
    each 32-column group ``G = ks // 2`` the columns are permuted so that lane ``t`` of an MMA's column
    quad reads its inputs of both steps in one 16-byte load: the fragment's logical column ``j`` (0-15) of
    step ``s = ks % 2`` is column ``32 G + 8 (j % 8 // 2) + 4 s + 2 (j // 8) + j % 2``. Cells, in the MMA's
    register order: 0 rows 0-7 and logical columns 0-7, 1 rows 8-15 and columns 0-7, 2 rows 0-7 and
    columns 8-15, 3 rows 8-15 and columns 8-15. Lane ``l = 4 g + t`` of a cell is its row ``g``, logical
    columns ``2 t, 2 t + 1``. Record ``f`` in ``stream`` (uint32 words, 16-byte units from ``offsets[f]``): the
    four cells' bitmaps (:meth:`masks`), then each marked pair as a word (logical column ``2 t`` in the low
    16 bits, ``2 t + 1`` in the high; a weight not kept is a zero half), cell by cell, lanes ascending,
    zero-padded to a multiple of 16 bytes. ``offsets[-1] * 4 == stream.size``. Zero weights are never stored.

    >>> import numpy as np
    >>> w = np.zeros((16, 32), dtype=np.float16)
    >>> w[0, 0], w[0, 4], w[9, 2] = 1, 2, 3
    >>> b = TiledBitmap.from_dense(w)
    >>> b
    <TiledBitmap shape=(16, 32) nnz=3 dtype=float16 words=16>
    >>> [int(x) for x in b.offsets]           # two fragments (steps 0 and 1), each bitmaps + one unit of pairs
    [0, 2, 4]
    >>> [hex(int(x)) for x in b.masks()[0]]   # lane 0 of cell 0 (row 0), lane 4 of cell 3 (row 9)
    ['0x1', '0x0', '0x0', '0x10']
    >>> bool((b.to_dense() == w).all())
    True
    """

    stream: np.ndarray
    offsets: np.ndarray
    shape: tuple[int, int]
    value_dtype: np.dtype

    @staticmethod
    def column(ks, j):
        """The column of ``A`` that logical column ``j`` (0-15) of fragment step ``ks`` holds: the permutation of
        each 32-column group that gives a lane both k-steps' inputs in one 16-byte load (works elementwise on
        arrays)."""
        return ks // 2 * 32 + 8 * (j % 8 // 2) + 4 * (ks % 2) + 2 * (j // 8) + j % 2

    @property
    def grid(self) -> tuple[int, int]:
        """Fragments down and across: ``(ceil(M / 16), 2 ceil(K / 32))``."""
        m, k = self.shape
        return -(-m // 16), 2 * -(-k // 32)

    @property
    def nnz(self) -> int:
        """Stored weights: the nonzero halves of the stored pairs."""
        return int(np.count_nonzero(self._halves()))

    def masks(self) -> np.ndarray:
        """The fragments' cell bitmaps, ``(fragments, 4)`` uint32 (bit ``l`` of cell ``c``: lane ``l``'s pair)."""
        self._check_records()
        at = self.offsets[:-1, None] * 4 + np.arange(4)
        return self.stream[at] if at.size else np.zeros((0, 4), np.uint32)

    def counts(self) -> np.ndarray:
        """Stored pairs a fragment (int64)."""
        return np.unpackbits(self.masks().view(np.uint8), axis=1).sum(axis=1, dtype=np.int64)

    def validate(self, full: bool = False) -> None:
        check_array(self.stream, "stream", ndim=1, dtypes=(np.uint32,))
        check_array(self.offsets, "offsets", ndim=1, dtypes=(np.int64,), shape=(self.grid[0] * self.grid[1] + 1,))
        off = self.offsets
        if off[0] != 0 or off[-1] * 4 != self.stream.size:
            raise ValueError(f"offsets: should start at 0 and end at stream.size / 4 = {self.stream.size / 4:g} "
                             f"(16-byte units), got {int(off[0])} and {int(off[-1])}")
        if not full:
            return
        self._check_records()
        counts = self.counts()
        want = 1 + -(-counts // 4)
        if (np.diff(off) != want).any():
            f = int(np.flatnonzero(np.diff(off) != want)[0])
            raise ValueError(f"offsets: fragment {f} spans {int(off[f + 1] - off[f])} 16-byte units, its bitmaps "
                             f"mark {int(counts[f])} pairs: expected {int(want[f])}")
        words = self._words()
        f, cell, lane = self._pairs()
        cut = self._cut()[f]                              # only fragments the edge cuts can reach past it
        rows, cols = self._pair_coords((f[cut], cell[cut], lane[cut]))
        m, k = self.shape
        outside = (rows >= m) | (cols >= k) | ((cols + 1 >= k) & (words[cut] >> np.uint32(16) != 0))
        if outside.any():
            raise ValueError(f"stream: a bitmap marks an entry outside the {self.shape} matrix (its fragment "
                             f"is cut by the edge)")
        if (words == 0).any():
            raise ValueError("stream: a bitmap marks a pair whose weights are both zero (zeros are not stored)")
        vals = words.view(np.uint16).view(self.value_dtype)
        if vals.size and not np.isfinite(vals.astype(np.float32)).all():
            raise ValueError("stream: values must be finite")

    def _check_records(self) -> None:
        """The cheap checks, and every record at least the 16-byte unit of its bitmaps: what :meth:`masks` reads
        lies in ``stream`` (an edited ``offsets`` array may no longer span it, or step back)."""
        self.validate()
        steps = np.diff(self.offsets)
        if (steps < 1).any():
            f = int(np.flatnonzero(steps < 1)[0])
            raise ValueError(f"offsets: fragment {f} is shorter than the 16-byte unit of its bitmaps")

    def _pairs(self):
        """``(fragment, cell, lane)`` of every stored pair, in storage order."""
        bits = np.unpackbits(self.masks().view(np.uint8), axis=1, bitorder="little").reshape(-1, 4, 32)
        return np.nonzero(bits)

    def _words(self) -> np.ndarray:
        """The stored pairs' words, in storage order (a record's pairs after its bitmaps; none past its length:
        :meth:`validate` checks the lengths first)."""
        counts = self.counts()
        at = np.arange(int(counts.sum())) + np.repeat(self.offsets[:-1] * 4 + 4 - (np.cumsum(counts) - counts), counts)
        if at.size and at.max() >= self.stream.size:
            raise ValueError("offsets: the bitmaps mark more pairs than the stream holds")
        return self.stream[at]

    def _cut(self) -> np.ndarray:
        """Per fragment: whether the matrix's edge cuts it (the last row block when ``M`` is not a multiple of 16,
        the last 32-column group when ``K`` is not one of 32)."""
        rbs, ksteps = self.grid
        cut = np.zeros((rbs, ksteps), bool)
        if self.shape[0] % 16:
            cut[-1] = True
        if self.shape[1] % 32:
            cut[:, -2:] = True
        return cut.ravel()

    def _pair_coords(self, pairs=None):
        """Row and (even) column of the low weight of every stored pair (or of ``pairs``: ``(fragment, cell,
        lane)`` arrays as :meth:`_pairs` gives them), in storage order."""
        f, cell, lane = self._pairs() if pairs is None else pairs
        ks = f % self.grid[1]
        rows = f // self.grid[1] * 16 + 8 * (cell % 2) + lane // 4
        cols = self.column(ks, 2 * (lane % 4) + 8 * (cell // 2))
        return rows, cols

    def _halves(self) -> np.ndarray:
        """The stored pairs' 16-bit halves, low then high a pair, in storage order."""
        return self._words().view(np.uint16)

    def _coords(self):
        """Row, column and 16-bit pattern of every stored nonzero weight, in storage order."""
        rows, cols = self._pair_coords()
        halves = self._halves().reshape(-1, 2)
        keep = halves != 0
        r = np.repeat(rows, 2).reshape(-1, 2)[keep]
        c = (np.repeat(cols, 2).reshape(-1, 2) + np.array([0, 1]))[keep]
        return r, c, halves[keep]

    def _index_arrays(self):
        return (self.offsets,)

    def nbytes(self) -> NBytes:
        """Values: the stored weights at 2 bytes; index data: the bitmaps, the zero halves of stored pairs, the
        padding and ``offsets``."""
        v = 2 * self.nnz
        i = 4 * int(self.stream.size) - v + int(self.offsets.nbytes)
        return NBytes(v, i, v + i)

    def __repr__(self) -> str:
        return (f"<TiledBitmap shape={self.shape} nnz={self.nnz} dtype={self.dtype} words={self.stream.size}>")

    @staticmethod
    def _strip_words(bits: np.ndarray) -> np.ndarray:
        """The pair words ``(fragments, 4, 32)`` of a strip of whole row blocks: ``bits`` (``16 R x 32 G``, the 16-bit
        patterns, zero where nothing is stored) reordered in one transpose: row ``16 rb + 8 a + g`` and column
        ``32 G + 8 t + 4 s + 2 b + h`` is half ``h`` of lane ``4 g + t`` of cell ``a + 2 b`` of fragment
        ``(rb, 2 G + s)`` (:meth:`column`)."""
        rbs, groups = bits.shape[0] // 16, bits.shape[1] // 32
        order = bits.reshape(rbs, 2, 8, groups, 4, 2, 2, 2).transpose(0, 3, 5, 6, 1, 2, 4, 7)
        return np.ascontiguousarray(order).view(np.uint32).reshape(rbs * groups * 2, 4, 32)

    @classmethod
    def _from_strips(cls, strips, shape, d) -> "TiledBitmap":
        """Assemble the records from the pair words of consecutive strips (:meth:`_strip_words`): a pair is stored
        where its word is nonzero."""
        masks, counts, pairs = [], [], []
        for words in strips:
            stored = words != 0
            masks.append(np.packbits(stored, axis=2, bitorder="little").view("<u4").reshape(-1, 4))
            counts.append(stored.sum(axis=(1, 2), dtype=np.int64))
            pairs.append(words[stored])                               # fragment, cell, lane order
        masks = np.concatenate(masks) if masks else np.zeros((0, 4), np.uint32)
        counts = np.concatenate(counts) if counts else np.zeros(0, np.int64)
        pairs = np.concatenate(pairs) if pairs else np.zeros(0, np.uint32)
        offsets = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(1 + -(-counts // 4), out=offsets[1:])
        stream = np.zeros(int(offsets[-1]) * 4, dtype=np.uint32)
        stream[(offsets[:-1, None] * 4 + np.arange(4)).ravel()] = masks.ravel()
        # the pairs fill each record's words 4 .. 4 + count, in order: mark those runs (+1 at a run's start, -1
        # past its end, a running sum) and assign through the mark, without an index per pair
        edges = np.zeros(stream.size + 1, dtype=np.int8)
        np.add.at(edges, offsets[:-1] * 4 + 4, 1)
        np.add.at(edges, offsets[:-1] * 4 + 4 + counts, -1)
        stream[np.cumsum(edges[:-1], dtype=np.int8).view(bool)] = pairs
        return cls(stream, offsets, shape, d)

    @staticmethod
    def _strip_rows(shape) -> int:
        """Rows a strip holds: whole row blocks, about :data:`_BITMAP_STRIP_ENTRIES` entries of the padded width."""
        return 16 * max(1, _BITMAP_STRIP_ENTRIES // (16 * 32 * max(-(-shape[1] // 32), 1)))

    @classmethod
    def from_coords(cls, rows, cols, values, shape) -> "TiledBitmap":
        """From entries ``values[i]`` at ``(rows[i], cols[i])`` (distinct positions, any order; zeros dropped).
        The entries are placed strip by strip of rows into a padded 16-bit block and reordered by
        :meth:`_strip_words`."""
        shape = _as_shape(shape)
        rows, cols, values, d = cls._entries(rows, cols, values, shape)
        m, k = shape
        width = 32 * -(-k // 32)
        if rows.size > 1 and (rows[1:] < rows[:-1]).any():
            order = np.argsort(rows, kind="stable")
            rows, cols, values = rows[order], cols[order], values[order]
        bits = values.view(np.uint16)
        zero = (bits & np.uint16(0x7FFF)) == 0                         # +-0.0 (sign bit aside): not stored
        step = cls._strip_rows(shape)

        def strips():
            for r0 in range(0, 16 * -(-m // 16), step):
                r1 = min(r0 + step, 16 * -(-m // 16))
                lo, hi = np.searchsorted(rows, [r0, r1])
                block = np.zeros((r1 - r0, width), np.uint16)
                seen = np.zeros(block.shape, bool)
                seen[rows[lo:hi] - r0, cols[lo:hi]] = True
                if int(seen.sum()) != hi - lo:
                    raise ValueError("rows, cols: a position is given twice")
                block[rows[lo:hi] - r0, cols[lo:hi]] = np.where(zero[lo:hi], np.uint16(0), bits[lo:hi])
                yield cls._strip_words(block)

        return cls._from_strips(strips(), shape, d)

    @classmethod
    def from_dense(cls, dense, mask=None) -> "TiledBitmap":
        """Store the nonzero entries of a float16/bfloat16 ``dense`` that ``mask`` keeps (default all)."""
        dense = check_array(dense, "dense", ndim=2, dtypes=None, finite=True)
        d = _half_dtype(dense.dtype, "dense")
        if mask is not None:
            check_array(mask, "mask", dtypes=(np.bool_,), shape=dense.shape)
        m, k = dense.shape
        height, width = 16 * -(-m // 16), 32 * -(-k // 32)
        step = cls._strip_rows(dense.shape)

        def strips():
            for r0 in range(0, height, step):
                r1 = min(r0 + step, height)
                block = np.zeros((r1 - r0, width), np.uint16)
                part = dense[r0:min(r1, m)]
                keep = part != 0 if mask is None else mask[r0:min(r1, m)] & (part != 0)
                block[:part.shape[0], :k] = np.where(keep, part.view(np.uint16), np.uint16(0))
                yield cls._strip_words(block)

        return cls._from_strips(strips(), dense.shape, d)

    @classmethod
    def from_csr(cls, csr) -> "TiledBitmap":
        """The nonzero entries of a :class:`CSR` (or any format with ``to_csr``) of float16/bfloat16 values."""
        if not isinstance(csr, _Format):
            raise TypeError(f"csr: expected a CSR (or another sparsekit format), got {type(csr).__name__}")
        c = csr if isinstance(csr, CSR) else csr.to_csr()
        rows = np.repeat(np.arange(c.shape[0]), np.diff(c.indptr))
        return cls.from_coords(rows, c.indices, c.data, c.shape)

    def to_csr(self) -> "CSR":
        """The stored weights as a :class:`CSR` (int32 indices)."""
        self.validate(full=True)
        rows, cols, bits = self._coords()
        order = np.lexsort((cols, rows))
        indptr = np.zeros(self.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=self.shape[0]), out=indptr[1:])
        return CSR(indptr, cols[order].astype(np.int32), bits[order].view(self.value_dtype), self.shape)

    def to_dense(self) -> np.ndarray:
        self.validate(full=True)
        rows, cols, bits = self._coords()
        out = np.zeros(self.shape, dtype=self.dtype)
        out[rows, cols] = bits.view(self.dtype)
        return out

    def mask(self) -> np.ndarray:
        self.validate(full=True)
        rows, cols, _ = self._coords()
        out = np.zeros(self.shape, dtype=bool)
        out[rows, cols] = True
        return out
