"""Property tests for sparsekit.formats: round trips, invariants, SciPy agreement,
lossless conversions, byte counts, reprs, and every validate() rule."""
from __future__ import annotations

import copy
import dataclasses
import doctest
import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

import sparsekit.formats
from sparsekit.formats import BSR, COO, CSR, ELL, NM, BlockedELL, NBytes, convert

from strategies import (bsr_matrices, coo_matrices, csr_matrices, dtypes, ell_matrices, masked_dense, shapes_2d,
                        sparse_matrices)

INDEX_FIELDS = {CSR: ("indptr", "indices"), COO: ("row", "col"), ELL: ("indices",), BlockedELL: ("indices",),
                BSR: ("indptr", "indices")}


def options(x) -> dict:
    """The from_dense keyword arguments that rebuild ``x``'s exact layout."""
    if isinstance(x, BlockedELL):
        return {"block": x.block, "index_dtype": x.indices.dtype}
    if isinstance(x, NM):
        return {"n": x.n, "m": x.m}
    if isinstance(x, BSR):
        return {"blocksize": x.blocksize, "index_dtype": x.indices.dtype}
    if isinstance(x, COO):
        return {"index_dtype": x.col.dtype}
    return {"index_dtype": x.indices.dtype}


def assert_same(a, b) -> None:
    """Same class, shape, parameters and bit-identical arrays (dtypes included)."""
    assert type(a) is type(b)
    for f in dataclasses.fields(a):
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if isinstance(va, np.ndarray):
            assert va.dtype == vb.dtype and va.shape == vb.shape, f.name
            np.testing.assert_array_equal(va, vb, err_msg=f.name)
        else:
            assert va == vb, f.name


def snapshot(x) -> dict:
    return {f.name: copy.deepcopy(getattr(x, f.name)) for f in dataclasses.fields(x)}


def assert_unchanged(x, before: dict) -> None:
    for name, old in before.items():
        new = getattr(x, name)
        if isinstance(old, np.ndarray):
            assert new.dtype == old.dtype and new.shape == old.shape
            np.testing.assert_array_equal(new, old)
        else:
            assert new == old


# --------------------------------------------------------------------------- round trips + invariants

FLOATS = [np.float16, np.float32, np.float64]


@pytest.mark.parametrize("dt", FLOATS)
@given(data=st.data())
def test_csr_coo_round_trip(dt, data):
    dense, mask = data.draw(masked_dense(dtype=dt))
    for cls in (CSR, COO):
        x = cls.from_dense(dense, mask)
        x.validate(full=True)
        np.testing.assert_array_equal(x.to_dense(), dense)
        np.testing.assert_array_equal(x.mask(), mask)
        assert x.nnz == mask.sum() and x.dtype == dense.dtype
        assert x.density == pytest.approx(mask.mean())


@pytest.mark.parametrize("dt", FLOATS)
@given(data=st.data(), idt=st.sampled_from([np.int16, np.int32]))
def test_ell_round_trip_and_layout(dt, data, idt):
    dense, mask = data.draw(masked_dense(pattern="uniform", dtype=dt))
    e = ELL.from_dense(dense, mask, index_dtype=idt)
    e.validate(full=True)
    m, k = dense.shape
    kp = int(mask[0].sum())
    assert e.kprime == kp and e.values.shape == (m, kp) and e.nnz == m * kp
    assert e.values.flags.f_contiguous and e.indices.flags.f_contiguous and e.indices.dtype == idt
    np.testing.assert_array_equal(e.to_dense(), dense)
    np.testing.assert_array_equal(e.mask(), mask)
    # the paper's layout: ellval[x*M + row] == values[row, x] (Listing 1, line 26), and a view
    rows, xs = np.meshgrid(np.arange(m), np.arange(kp), indexing="ij")
    np.testing.assert_array_equal(e.ellval[xs * m + rows], e.values)
    np.testing.assert_array_equal(e.ellidx[xs * m + rows], e.indices)
    assert np.shares_memory(e.ellval, e.values) or e.values.size == 0


@pytest.mark.parametrize("dt", FLOATS)
@given(data=st.data(), b=st.sampled_from([1, 2, 3, 4]))
def test_blocked_ell_round_trip(dt, data, b):
    dense, mask = data.draw(masked_dense(pattern="blocked_uniform", dtype=dt, block=b))
    x = BlockedELL.from_dense(dense, mask, block=b)
    x.validate(full=True)
    np.testing.assert_array_equal(x.to_dense(), dense)
    tiles = mask.reshape(mask.shape[0] // b, b, mask.shape[1] // b, b).any(axis=(1, 3))
    np.testing.assert_array_equal(x.mask(), np.kron(tiles, np.ones((b, b), dtype=bool)).astype(bool))
    assert x.nnz == tiles.sum() * b * b


@pytest.mark.parametrize("dt", FLOATS)
@given(data=st.data(), nm=st.sampled_from([(2, 4), (1, 2), (1, 4), (4, 8), (3, 3)]))
def test_nm_round_trip(dt, data, nm):
    n, m = nm
    dense, mask = data.draw(masked_dense(pattern="n_m", dtype=dt, n=n, m=m))
    x = NM.from_dense(dense, mask, n=n, m=m)
    x.validate(full=True)
    np.testing.assert_array_equal(x.to_dense(), dense)
    assert (x.mask() | ~mask).all()  # every kept entry is stored (plus zero padding)
    assert x.nnz == dense.shape[0] * dense.shape[1] // m * n and x.density == pytest.approx(n / m)
    padding = ~mask[np.arange(dense.shape[0])[:, None], x._columns()]  # stored but not kept
    assert (x.values[padding] == 0).all()


@pytest.mark.parametrize("dt", FLOATS)
@given(data=st.data(), b=st.sampled_from([1, 2, 3]))
def test_bsr_round_trip(dt, data, b):
    dense, mask = data.draw(masked_dense(pattern="block", dtype=dt, block=b))
    x = BSR.from_dense(dense, mask, blocksize=(b, b))
    x.validate(full=True)
    np.testing.assert_array_equal(x.to_dense(), dense)
    assert (x.mask() | ~mask).all() and x.nnz == x.nnzb * b * b


@given(x=sparse_matrices())
def test_rebuild_from_dense_and_mask_is_identical(x):
    x.validate(full=True)
    assert_same(type(x).from_dense(x.to_dense(), x.mask(), **options(x)), x)


@given(x=sparse_matrices())
def test_validators_never_mutate(x):
    before = snapshot(x)
    x.validate()
    x.validate(full=True)
    assert_unchanged(x, before)


# --------------------------------------------------------------------------- conversions

@given(x=sparse_matrices())
def test_conversions_are_lossless(x):
    csr = x.to_csr()
    csr.validate(full=True)
    np.testing.assert_array_equal(csr.to_dense(), x.to_dense())
    np.testing.assert_array_equal(csr.mask(), x.mask())
    assert csr.nnz == x.nnz  # explicit zeros (padding, tile interiors) travel too
    assert_same(convert(csr, type(x), **options(x)), x)
    coo = convert(x, COO)
    assert_same(convert(coo, type(x), **options(x)), x)
    assert_same(type(x).from_csr(csr, **options(x)), x)
    assert_same(convert(x, CSR), x.to_csr(index_dtype=np.int32))


@given(x=csr_matrices())
def test_convert_to_ell_needs_uniform_rows(x):
    counts = np.diff(x.indptr)
    if x.shape[0] and (counts != counts[0]).any():
        with pytest.raises(ValueError, match="same number of kept entries in every row"):
            convert(x, ELL)
    else:
        assert_same(convert(x, ELL).to_csr(), x)


@given(x=csr_matrices(), strip=st.sampled_from([1, 7, 1 << 22]))
def test_padded_ell_holds_the_csr_and_pads_at_the_lowest_free_columns(x, strip):
    """Every row is as long as the longest; the stored entries are the CSR's (explicit zeros included) and the rest
    are zeros at the lowest columns the row leaves free; columns ascend; the result does not depend on the strip
    of rows laid out at a time."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sparsekit.formats, "_PAD_STRIP_ENTRIES", strip)
        e = ELL.padded_from_csr(x)
    e.validate(full=True)
    counts = np.diff(x.indptr)
    m, k = x.shape
    assert e.kprime == (int(counts.max()) if m else 0)
    assert e.indices.dtype == (np.int16 if k <= 32767 else np.int32)
    dense = np.zeros(x.shape, dtype=x.dtype)
    for r in range(m):
        own = x.indices[x.indptr[r]:x.indptr[r + 1]]
        dense[r, own] = x.data[x.indptr[r]:x.indptr[r + 1]]
        free = np.setdiff1d(np.arange(k), own)[:e.kprime - len(own)]
        np.testing.assert_array_equal(e.indices[r], np.sort(np.concatenate([own, free])))
        assert (e.values[r][np.isin(e.indices[r], free)] == 0).all()
    np.testing.assert_array_equal(e.to_dense(), dense)


def test_padded_ell_refuses_other_formats():
    with pytest.raises(TypeError, match="csr: expected a CSR, got COO"):
        ELL.padded_from_csr(COO.from_dense(np.eye(2)))


@given(x=ell_matrices(index_dtype=np.int32))
def test_ell_to_csr_fast_path_matches_generic(x):
    assert_same(x.to_csr(), CSR.from_dense(x.to_dense(), x.mask()))


def test_convert_rejects_non_formats():
    with pytest.raises(TypeError, match="csr: expected a CSR, got COO"):
        ELL.from_csr(COO.from_dense(np.eye(2)))
    with pytest.raises(TypeError, match="x: expected a sparsekit format"):
        convert(np.eye(2), CSR)
    with pytest.raises(TypeError, match="cls: expected one of"):
        convert(CSR.from_dense(np.eye(2)), dict)


# --------------------------------------------------------------------------- SciPy

def _scipy_dtype(dt):
    return np.float32 if dt == np.float16 else None


@given(x=st.one_of(csr_matrices(), coo_matrices(), bsr_matrices()))
def test_scipy_agreement(x):
    s = x.to_scipy(dtype=_scipy_dtype(x.dtype))
    assert s.format == type(x).__name__.lower() and s.nnz == x.nnz
    np.testing.assert_array_equal(s.toarray(), x.to_dense().astype(s.dtype))
    back = type(x).from_scipy(s, dtype=x.dtype)
    assert_same(back, type(x).from_dense(x.to_dense(), x.mask(), **options(back)))


@given(shape=shapes_2d(max_size=10), dt=dtypes(allowed=(np.float32, np.float64)), data=st.data())
def test_from_scipy_canonicalises_duplicates_and_order(shape, dt, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    nnz = data.draw(st.integers(0, 20))
    row, col = rng.integers(0, shape[0], nnz), rng.integers(0, shape[1], nnz)
    vals = rng.integers(1, 8, nnz).astype(dt)  # small integers: duplicate sums are exact in any order
    a = sp.coo_array((vals, (row, col)), shape=shape)  # unsorted, with duplicates
    want = a.toarray()
    for cls in (CSR, COO):
        x = cls.from_scipy(a)
        x.validate(full=True)
        np.testing.assert_array_equal(x.to_dense(), want)
    assert a.nnz == nnz  # the input is not modified


def test_scipy_float16_needs_an_explicit_lossless_widening():
    x = CSR.from_dense(np.eye(3, dtype=np.float16))
    with pytest.raises(TypeError, match="SciPy does not support float16"):
        x.to_scipy()
    assert x.to_scipy(dtype=np.float32).dtype == np.float32
    with pytest.raises(TypeError, match="lossless widening"):
        CSR.from_dense(np.eye(3)).to_scipy(dtype=np.float32)
    with pytest.raises(TypeError, match="a: expected a scipy.sparse"):
        CSR.from_scipy(np.eye(3))


def test_bsr_from_scipy_keeps_blocksize():
    a = sp.bsr_array(np.kron(np.eye(2), np.ones((2, 3))), blocksize=(2, 3))
    x = BSR.from_scipy(a)
    assert x.blocksize == (2, 3) and x.nnzb == 2
    np.testing.assert_array_equal(x.to_dense(), a.toarray())


# --------------------------------------------------------------------------- nbytes (hand counts)

def test_nbytes_hand_counts():
    w = np.zeros((4, 8), dtype=np.float16)
    w[:, ::2] = 1.0  # 4 per row: 16 entries, uniform, 2:4-compatible
    # CSR: 16 values x 2 B; 16 int32 indices + 5 int32 pointers
    assert CSR.from_dense(w).nbytes() == NBytes(32, 16 * 4 + 5 * 4, 32 + 84)
    assert CSR.from_dense(w, index_dtype=np.int16).nbytes() == NBytes(32, 16 * 2 + 5 * 4, 32 + 52)
    assert COO.from_dense(w).nbytes() == NBytes(32, 2 * 16 * 4, 32 + 128)
    assert ELL.from_dense(w).nbytes() == NBytes(32, 16 * 4, 96)
    assert ELL.from_dense(w, index_dtype=np.int16).nbytes() == NBytes(32, 16 * 2, 64)
    # NM 2:4: 16 values; 16 positions x 2 bits = 4 bytes (hardware metadata); 16 bytes as uint8
    nm = NM.from_dense(w, n=2, m=4)
    assert nm.nbytes() == NBytes(32, 4, 36)
    assert nm.nbytes(packed=False) == NBytes(32, 16, 48)
    # 1:8 uses 3 bits each: 4 values -> 12 bits -> 2 bytes
    assert NM.from_dense(np.eye(4, 8, dtype=np.float32) , n=1, m=8).nbytes() == NBytes(16, 2, 18)
    # BSR 2x2: every 2x2 tile of w holds a kept entry -> 8 tiles of 4 values; 8 indices + 3 pointers
    assert BSR.from_dense(w, blocksize=(2, 2)).nbytes() == NBytes(8 * 4 * 2, 8 * 4 + 3 * 4, 64 + 44)
    # BlockedELL block 2: 4 tiles per block row, 2 block rows
    assert BlockedELL.from_dense(w, block=2).nbytes() == NBytes(8 * 4 * 2, 8 * 4, 96)


@given(x=sparse_matrices())
def test_nbytes_counts_every_array_at_its_width(x):
    nb = x.nbytes()
    assert nb.values == x.nnz * x.dtype.itemsize and nb.total == nb.values + nb.indices
    if isinstance(x, NM):
        assert nb.indices == math.ceil(x.nnz * math.ceil(math.log2(x.m)) / 8)
    else:
        assert nb.indices == sum(getattr(x, f).size * getattr(x, f).dtype.itemsize for f in INDEX_FIELDS[type(x)])


# --------------------------------------------------------------------------- repr

def test_reprs():
    w = np.ones((1024, 1024), dtype=np.float16)
    mask = np.zeros_like(w, dtype=bool)
    mask[:, :410] = True
    assert repr(ELL.from_dense(w, mask, index_dtype=np.int16)) == \
        "<ELL shape=(1024, 1024) k'=410 dtype=float16 index=int16>"
    e = np.eye(4, dtype=np.float32)
    assert repr(CSR.from_dense(e)) == "<CSR shape=(4, 4) nnz=4 dtype=float32 index=int32>"
    assert repr(COO.from_dense(e, index_dtype=np.int64)) == "<COO shape=(4, 4) nnz=4 dtype=float32 index=int64>"
    assert repr(BlockedELL.from_dense(e, block=2)) == \
        "<BlockedELL shape=(4, 4) block=2 kb=1 dtype=float32 index=int32>"
    assert repr(NM.from_dense(e, n=1, m=4)) == "<NM shape=(4, 4) n:m=1:4 dtype=float32 positions=uint8>"
    assert repr(BSR.from_dense(e, blocksize=(2, 1))) == \
        "<BSR shape=(4, 4) blocksize=(2, 1) nnzb=4 dtype=float32 index=int32>"


# --------------------------------------------------------------------------- edge shapes

EDGE = {
    "empty rows": np.zeros((0, 4)),
    "empty cols": np.zeros((4, 0)),
    "nnz=0": np.zeros((4, 8)),
    "full": np.arange(1.0, 33.0).reshape(4, 8),
    "non-square": np.kron(np.eye(2), np.ones((1, 4))),
}


@pytest.mark.parametrize("name", list(EDGE))
@pytest.mark.parametrize("dt", FLOATS)
def test_edge_shapes_round_trip_everywhere(name, dt):
    w = EDGE[name].astype(dt)
    builds = [CSR.from_dense(w), COO.from_dense(w), BSR.from_dense(w, blocksize=(2, 2)),
              BlockedELL.from_dense(w, block=2), NM.from_dense(w, n=4, m=4), ELL.from_dense(w)]
    for x in builds:
        x.validate(full=True)
        assert x.dtype == dt
        np.testing.assert_array_equal(x.to_dense(), w)
        assert x.to_dense().dtype == dt
        assert_same(convert(x.to_csr(), type(x), **options(x)), x)
    if w.size == 0:
        assert all(x.nnz == 0 and x.density == 0.0 for x in builds)


def test_full_rows_and_explicit_zeros():
    w = np.zeros((3, 5), dtype=np.float32)
    e = ELL.from_dense(w, np.ones_like(w, dtype=bool))  # every entry kept, all explicit zeros
    assert e.kprime == 5 and e.nnz == 15 and e.density == 1.0
    assert_same(convert(e, COO).to_csr(), e.to_csr())


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("cls, kw", [(CSR, {}), (COO, {}), (ELL, {}), (BlockedELL, {"block": 1}),
                                     (NM, {"n": 1, "m": 1}), (BSR, {"blocksize": (1, 1)})])
def test_from_dense_rejects_bad_input(cls, kw):
    with pytest.raises(ValueError, match=r"dense: expected a 2-D array, got shape \(4,\)"):
        cls.from_dense(np.ones(4), **kw)
    with pytest.raises(TypeError, match=r"dense: dtype must be one of .*got int64"):
        cls.from_dense(np.ones((2, 2), dtype=np.int64), **kw)
    with pytest.raises(TypeError, match="dense: expected a numpy.ndarray, got list"):
        cls.from_dense([[1.0]], **kw)
    for bad in (np.nan, np.inf):
        w = np.ones((2, 2))
        w[1, 0] = bad
        with pytest.raises(ValueError, match=r"dense: must be finite, found 1 NaN/Inf"):
            cls.from_dense(w, **kw)
    with pytest.raises(ValueError, match=r"mask: expected shape \(2, 2\), got \(2, 3\)"):
        cls.from_dense(np.ones((2, 2)), np.ones((2, 3), dtype=bool), **kw)
    with pytest.raises(TypeError, match="mask: dtype must be one of \\(bool\\), got float64"):
        cls.from_dense(np.ones((2, 2)), np.ones((2, 2)), **kw)


def test_from_dense_pattern_errors():
    w = np.ones((3, 4), dtype=np.float32)
    mask = np.ones((3, 4), dtype=bool)
    mask[2, 1] = False
    with pytest.raises(ValueError, match="mask: ELL needs the same number of kept entries in every row "
                                         r"\(uniform sparsity\); row 0 keeps 4, row 2 keeps 3"):
        ELL.from_dense(w, mask)
    with pytest.raises(ValueError, match=r"mask: 2:4 allows at most 2 kept entries in each group of 4 "
                                         r"columns; row 0 group 0 \(columns 0-3\) keeps 4"):
        NM.from_dense(w, n=2, m=4)
    with pytest.raises(ValueError, match="dense.shape\\[1\\]: must be divisible by 3, got 4"):
        NM.from_dense(w, n=2, m=3)
    with pytest.raises(ValueError, match=r"n: must be <= m \(2\), got 3"):
        NM.from_dense(np.ones((2, 4)), n=3, m=2)
    with pytest.raises(ValueError, match="dense.shape\\[0\\]: must be divisible by 2, got 3"):
        BSR.from_dense(w, blocksize=(2, 2))
    with pytest.raises(ValueError, match="dense.shape\\[0\\]: must be divisible by 2, got 3"):
        BlockedELL.from_dense(w, block=2)
    b = np.zeros((4, 4), dtype=np.float32)
    b[0, 0] = b[0, 3] = b[3, 3] = 1.0
    with pytest.raises(ValueError, match="mask: BlockedELL needs the same number of kept blocks in every "
                                         "block row; block row 0 keeps 2, block row 1 keeps 1"):
        BlockedELL.from_dense(b, block=2)
    wide = np.ones((1, 32768), dtype=np.float16)
    for cls in (CSR, COO, ELL):
        with pytest.raises(ValueError, match="index_dtype: int16 cannot index .*32768"):
            cls.from_dense(wide, index_dtype=np.int16)
    assert ELL.from_dense(wide[:, :32767], index_dtype=np.int16).indices.max() == 32766
    with pytest.raises(TypeError, match=r"index_dtype: must be one of \(int16, int32\), got"):
        ELL.from_dense(w[:1], index_dtype=np.int64)


def _csr():
    return CSR.from_dense(np.array([[1., 0., 2.], [0., 0., 0.], [3., 4., 0.]], dtype=np.float32))


def _csr16():
    return _csr().to_csr(index_dtype=np.int16)


def _coo():
    return COO.from_dense(np.array([[1., 0., 2.], [3., 4., 0.]], dtype=np.float32))


def _ell():
    return ELL.from_dense(np.array([[1., 0., 2.], [3., 4., 0.]], dtype=np.float32))


def _coo16():
    return COO.from_dense(_coo().to_dense(), index_dtype=np.int16)


def _ell16():
    return ELL.from_dense(_ell().to_dense(), index_dtype=np.int16)


def _bell():
    w = np.zeros((4, 6), dtype=np.float32)
    w[0, 0] = w[0, 5] = w[2, 2] = w[3, 5] = 1.0
    return BlockedELL.from_dense(w, block=2)


def _nm():
    return NM.from_dense(np.array([[1., 0., 2., 0., 0., 3., 0., 4.]], dtype=np.float32), n=2, m=4)


def _bsr():
    w = np.zeros((4, 6), dtype=np.float32)
    w[0, 0] = w[0, 5] = w[2, 2] = 1.0
    return BSR.from_dense(w, blocksize=(2, 2))


def _i(*v, dtype=np.int32):
    return np.array(v, dtype=dtype)


def _f_order(a):
    return np.asfortranarray(a)


def _nan_at(a, idx):
    b = a.copy(order="A")
    b[idx] = np.nan
    return b


# (make a valid instance, field, corrupted value or function of the old value, full?, message regex)
CORRUPTIONS = [
    # CSR
    (_csr, "indptr", _i(0, 2, 2), False, r"indptr: length should be 4 \(rows \+ 1\), got 3"),
    (_csr, "indptr", _i(1, 2, 2, 4), False, "indptr: first entry should be 0, got 1"),
    (_csr, "indptr", _i(0, 2, 2, 3), False, r"indptr: last entry should be 4 \(the number of stored entries\), got 3"),
    (_csr, "indptr", lambda a: a.astype(np.int16), False, r"indptr: dtype must be one of \(int32, int64\), got int16"),
    (_csr, "indices", _i(0, 2, 0), False, r"indices: length should equal len\(data\) = 4, got 3"),
    (_csr, "indices", lambda a: a.astype(np.float32), False, "indices: dtype must be one of .*got float32"),
    (_csr, "data", lambda a: a.astype(np.int32), False, "data: dtype must be one of .*got int32"),
    (_csr, "data", lambda a: a.reshape(2, 2), False, r"data: expected a 1-D array, got shape \(2, 2\)"),
    (_csr16, "shape", (3, 40000), False, "indices: int16 cannot index columns = 40000"),
    (_csr, "indptr", _i(0, 3, 2, 4), True, r"indptr: should be non-decreasing, got indptr\[2\] = 2 < indptr\[1\] = 3"),
    (_csr, "indices", _i(0, 3, 0, 1), True, r"indices: indices must lie in \[0, 3\), found 3"),
    (_csr, "indices", _i(0, 2, 0, -1), True, r"indices: indices must lie in \[0, 3\), found -1"),
    (_csr, "indices", _i(2, 0, 0, 1), True,
     "indices: should be strictly increasing within each row .*row 0 has 2 then 0"),
    (_csr, "indices", _i(0, 2, 1, 1), True,
     "indices: should be strictly increasing within each row .*row 2 has 1 then 1"),
    (_csr, "data", lambda a: _nan_at(a, 1), True, r"data: must be finite, found 1 NaN/Inf"),
    # COO
    (_coo, "row", _i(0, 0, 1), False, r"row: length should equal len\(data\) = 4, got 3"),
    (_coo, "col", _i(0, 2, 0), False, r"col: length should equal len\(data\) = 4, got 3"),
    (_coo, "row", lambda a: a.astype(np.float64), False, "row: dtype must be one of .*got float64"),
    (_coo16, "shape", (40000, 3), False, "row: int16 cannot index rows = 40000"),
    (_coo, "row", _i(0, 0, 2, 1), True, r"row: indices must lie in \[0, 2\), found 2"),
    (_coo, "col", _i(0, 5, 0, 1), True, r"col: indices must lie in \[0, 3\), found 5"),
    (_coo, "col", _i(2, 0, 0, 1), True, r"row, col: entries should be sorted row-major with no duplicates, "
                                        r"entry 0 is \(0, 2\) and entry 1 is \(0, 0\)"),
    (_coo, "col", _i(0, 2, 1, 1), True, r"entry 2 is \(1, 1\) and entry 3 is \(1, 1\)"),
    (_coo, "data", lambda a: _nan_at(a, 0), True, r"data: must be finite"),
    # ELL
    (_ell, "values", lambda a: np.ascontiguousarray(a), False, "values: should be Fortran-ordered"),
    (_ell, "indices", lambda a: np.ascontiguousarray(a), False, "indices: should be Fortran-ordered"),
    (_ell, "indices", lambda a: _f_order(a.astype(np.int64)), False,
     r"indices: dtype must be one of \(int16, int32\), got int64"),
    (_ell, "indices", lambda a: _f_order(a[:, :1]), False, r"indices: expected shape \(2, 2\), got \(2, 1\)"),
    (_ell, "values", lambda a: _f_order(a[:1]), False, r"values: expected shape \(2, \*\), got \(1, 2\)"),
    (_ell16, "shape", (2, 40000), False, r"indices: int16 cannot index columns = 40000 \(at most 32767\)"),
    (_ell, "shape", (2, 1), False, "values: K' should be at most the column count 1, got 2"),
    (_ell, "indices", lambda a: _f_order(a.astype(np.int16)), None, None),  # int16 is fine at K=3
    (_ell, "indices", lambda a: _f_order(np.array([[0, 3], [0, 1]], dtype=a.dtype)), True,
     r"indices: indices must lie in \[0, 3\), found 3"),
    (_ell, "indices", lambda a: _f_order(np.array([[0, 2], [1, 0]], dtype=a.dtype)), True,
     "indices: should be strictly increasing within each row .*row 1 has 1 then 0"),
    (_ell, "indices", lambda a: _f_order(np.array([[2, 2], [0, 1]], dtype=a.dtype)), True, "row 0 has 2 then 2"),
    (_ell, "values", lambda a: _nan_at(a, (1, 1)), True, r"values: must be finite"),
    # BlockedELL
    (_bell, "block", 3, False, "shape\\[0\\]: must be divisible by 3, got 4"),
    (_bell, "block", 0, False, "block: must be >= 1, got 0"),
    (_bell, "shape", (4, 2), False, r"indices: blocks per block row should be at most 1 \(shape\[1\] / block\), got 2"),
    (_bell, "block", 2.0, False, "block: expected an integer, got float"),
    (_bell, "indices", lambda a: a[:1], False, r"indices: expected shape \(2, \*\), got \(1, 2\)"),
    (_bell, "values", lambda a: a[:, :1], False, r"values: expected shape \(2, 2, 2, 2\), got \(2, 1, 2, 2\)"),
    (_bell, "indices", lambda a: np.array([[0, 3], [1, 2]], dtype=a.dtype), True,
     r"indices: indices must lie in \[0, 3\), found 3"),
    (_bell, "indices", lambda a: np.array([[2, 0], [1, 2]], dtype=a.dtype), True,
     "indices: should be strictly increasing within each block row .*block row 0 has 2 then 0"),
    (_bell, "values", lambda a: _nan_at(a, (0, 0, 1, 1)), True, r"values: must be finite"),
    # NM
    (_nm, "positions", lambda a: a.astype(np.int32), False, r"positions: dtype must be one of \(uint8\), got int32"),
    (_nm, "values", lambda a: a[:, :2], False, r"values: expected shape \(1, 4\), got \(1, 2\)"),
    (_nm, "n", 5, False, r"n: must be <= m \(4\), got 5"),
    (_nm, "n", 0, False, "n: must be >= 1, got 0"),
    (_nm, "m", 512, False, "m: must be <= 256, got 512"),
    (_nm, "m", 3, False, "shape\\[1\\]: must be divisible by 3, got 8"),
    (_nm, "positions", lambda a: np.array([[0, 4, 1, 3]], dtype=a.dtype), True,
     r"positions: must lie in \[0, m\) = \[0, 4\), found 4"),
    (_nm, "positions", lambda a: np.array([[0, 2, 3, 1]], dtype=a.dtype), True,
     "positions: should be strictly increasing within each group .*row 0 group 1 has 3 then 1"),
    (_nm, "values", lambda a: _nan_at(a, (0, 3)), True, r"values: must be finite"),
    # BSR
    (_bsr, "blocksize", (3, 2), False, "shape\\[0\\]: must be divisible by 3, got 4"),
    (_bsr, "indptr", _i(0, 2), False, r"indptr: length should be 3 \(block rows \+ 1\), got 2"),
    (_bsr, "indptr", _i(0, 2, 2), False, r"indptr: last entry should be 3 \(the number of stored blocks\), got 2"),
    (_bsr, "data", lambda a: a[:, :1], False, r"data: expected shape \(3, 2, 2\), got \(3, 1, 2\)"),
    (_bsr, "indptr", _i(0, 4, 3), True, r"indptr: should be non-decreasing, got indptr\[2\] = 3 < indptr\[1\] = 4"),
    (_bsr, "indices", _i(0, 3, 1), True, r"indices: indices must lie in \[0, 3\), found 3"),
    (_bsr, "indices", _i(2, 0, 1), True,
     "indices: should be strictly increasing within each block row .*block row 0 has 2 then 0"),
    (_bsr, "data", lambda a: _nan_at(a, (2, 1, 1)), True, r"data: must be finite"),
]


@pytest.mark.parametrize("make, field, bad, full, message", CORRUPTIONS,
                         ids=[f"{c[0].__name__[1:]}-{c[1]}-{i}" for i, c in enumerate(CORRUPTIONS)])
def test_validate_rules(make, field, bad, full, message):
    x = make()
    value = bad(getattr(x, field)) if callable(bad) else bad
    object.__setattr__(x, field, value)  # corrupt a frozen instance behind its back
    before = snapshot(x)
    if full is None:  # a control: this change is valid
        x.validate(full=True)
        return
    if full:
        x.validate()  # the cheap checks do not scan contents
    error = TypeError if ("dtype must" in message or "expected an integer" in message) else ValueError
    with pytest.raises(error, match=message):
        x.validate(full=True)
    assert_unchanged(x, before)
    if not full:  # constructors run the cheap checks
        kwargs = {f.name: getattr(x, f.name) for f in dataclasses.fields(x)}
        with pytest.raises((ValueError, TypeError), match=message):
            type(x)(**kwargs)


#: The full-scan corruptions of the index data (not of the values): every conversion that indexes with them refuses.
INDEX_CORRUPTIONS = [c for c in CORRUPTIONS if c[3] and "finite" not in c[4]]


@pytest.mark.parametrize("make, field, bad, full, message", INDEX_CORRUPTIONS,
                         ids=[f"{c[0].__name__[1:]}-{c[1]}-{i}" for i, c in enumerate(INDEX_CORRUPTIONS)])
def test_conversions_refuse_bad_stored_indices(make, field, bad, full, message):
    """A negative, out-of-range, unsorted or repeated stored index never wraps, overwrites or reaches SciPy."""
    x = make()
    object.__setattr__(x, field, bad(getattr(x, field)) if callable(bad) else bad)
    before = snapshot(x)
    calls = [x.to_dense, x.mask, x.to_csr, lambda: x.to_csr(index_dtype=np.int64), lambda: convert(x, COO)]
    if hasattr(x, "to_scipy"):
        calls.append(lambda: x.to_scipy(dtype=np.float64))
    for call in calls:
        with pytest.raises(ValueError, match=message):
            call()
    assert_unchanged(x, before)


@pytest.mark.parametrize("column", [-1, 3, 1000])
def test_csr_column_outside_the_matrix_is_refused_before_scipy(column):
    x = CSR(_i(0, 1), _i(column), np.array([5.0]), (1, 3))
    with pytest.raises(ValueError, match=rf"indices: indices must lie in \[0, 3\), found {column}"):
        x.to_scipy()
    with pytest.raises(ValueError, match=rf"found {column}"):
        x.to_dense()


def test_duplicate_coo_entry_is_refused_not_overwritten():
    x = COO(_i(0, 0), _i(1, 1), np.array([2.0, 3.0]), (1, 3))
    with pytest.raises(ValueError, match=r"no duplicates, entry 0 is \(0, 1\) and entry 1 is \(0, 1\)"):
        x.to_dense()


def test_constructor_checks_shape_arguments():
    with pytest.raises(ValueError, match=r"shape: expected a tuple of two non-negative integers, got \(2, -1\)"):
        CSR(_i(0, 0, 0), _i(), np.zeros(0), (2, -1))
    with pytest.raises(ValueError, match="blocksize: expected a tuple of two positive integers, got 2"):
        BSR(_i(0), _i(), np.zeros((0, 2, 2)), (0, 0), 2)
    assert CSR(_i(0, 0), _i(), np.zeros(0), [np.int64(1), 5]).shape == (1, 5)


def test_instances_are_frozen():
    x = _ell()
    with pytest.raises(dataclasses.FrozenInstanceError):
        x.values = x.values


@pytest.mark.parametrize("cls", [CSR, COO, BSR])
@pytest.mark.parametrize("values, dtype, message", [
    ([np.nan, 1.0], None, r"a: values must be finite, found nan \(1 NaN/Inf value\(s\)\)"),
    ([1.0, -np.inf], np.float32, "a: values must be finite, found -inf"),
    ([7e4, 1.0], np.float16, r"a: value 70000.0 overflows float16 \(largest 65504.0\)"),
])
def test_from_scipy_refuses_values_that_are_not_finite_in_the_dtype(cls, values, dtype, message):
    """As ``from_dense`` does: SciPy holds NaN/Inf, and a cast to float16 would make inf of 70000."""
    a = sp.csr_matrix(np.array([values], dtype=np.float32 if dtype == np.float16 else np.float64))
    with pytest.raises(ValueError, match=message):
        cls.from_scipy(a, dtype=dtype)


def test_from_scipy_keeps_the_largest_float16():
    a = sp.csr_matrix(np.array([[65504.0, 0.0, -65504.0]], dtype=np.float32))
    assert CSR.from_scipy(a, dtype=np.float16).data.tolist() == [65504.0, -65504.0]


# --------------------------------------------------------------------------- doctests

def test_doctests():
    result = doctest.testmod(sparsekit.formats, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 30 and result.failed == 0
