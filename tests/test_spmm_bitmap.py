"""TiledBitmap keeps its invariants, and sparsekit/gpu/spmm_bitmap.py equals sparsekit/reference/spmm_bitmap.py under the
simulator.

The format: round trips through dense and CSR, a bit per lane's register and the column permutation that
gives each lane its inputs in one 16-byte load, record lengths, and the checks that refuse a broken stream.
The kernel: float16 and bfloat16, ``B`` row-major and the linear-layer form, ``N`` from 1 to 24 (several
n-blocks, rows of ``X`` past ``N``), ``K`` cut inside a 32-column group (``X`` staged with zero columns), warps
on 1 to 4 row blocks, slices of ``K`` within a block and splits across blocks, rings of 4 and 8 chunks
(records across a chunk's end and the ring's), empty cells and fragments, fully dense fragments (the
longest record). Tolerance: that of every
half-precision tensor-core kernel (tests/spmm_close.py).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsekit.formats import CSR, TiledBitmap
from sparsekit.gpu import spmm_bitmap as gb
from sparsekit.reference import spmm_bitmap as rb
from spmm_close import assert_half_close
from strategies import dense_arrays, sparse_halves

BF16 = np.dtype(ml_dtypes.bfloat16)


@given(w=sparse_halves())
def test_round_trip(w):
    a = TiledBitmap.from_dense(w)
    a.validate(full=True)
    assert a.dtype == w.dtype and a.nnz == np.count_nonzero(w != 0)
    assert (a.to_dense() == w).all() and (a.mask() == (w != 0)).all()
    assert a.nbytes().total == 4 * a.stream.size + a.offsets.nbytes
    assert (np.diff(a.offsets) == 1 + -(-a.counts() // 4)).all()
    pairs = (w.astype(np.float32) != 0)
    pairs = np.pad(pairs, ((0, 0), (0, pairs.shape[1] % 2))).reshape(w.shape[0], -1, 2).any(axis=2)
    assert a.counts().sum() == pairs.sum()              # a pair stored when either of its weights is kept
    csr = a.to_csr()
    assert (csr.to_dense() == w).all()
    same = TiledBitmap.from_csr(csr)
    assert (same.stream == a.stream).all() and (same.offsets == a.offsets).all()


def test_lane_layout():
    """The MMA's A fragment: lane ``4 g + t`` holds bit ``l`` of each cell (cell 0: rows 0-7 and the fragment's
    logical columns 0-7; cell 2: logical columns 8-15), its word the pair of logical columns ``2 t, 2 t + 1``
    (low, high half); lane ``t``'s logical columns ``2 t, 2 t + 1, 2 t + 8, 2 t + 9`` of both k-steps of a
    32-column group are the 8 consecutive columns ``8 t ..``."""
    for t in range(4):
        for s in range(2):
            for g in range(8):
                lane = 4 * g + t
                for j, cell in ((2 * t, 0), (2 * t + 1, 0), (2 * t + 8, 2), (2 * t + 9, 2)):
                    col = 8 * t + 4 * s + 2 * (j // 8) + j % 2
                    assert 8 * t <= col < 8 * t + 8 and TiledBitmap.column(s, j) == col
                    w = np.zeros((16, 32), np.float16)
                    w[g, col] = 1
                    a = TiledBitmap.from_dense(w)
                    assert (a.masks()[s] == np.eye(4, dtype=np.uint32)[cell] << np.uint32(lane)).all()
                    assert a.stream[4 * a.offsets[s] + 4] == np.uint32(0x3C00) << np.uint32(16 * (j % 2))
                    assert a.nnz == 1 and a.counts()[1 - s] == 0


def test_constructors_work_strip_by_strip(monkeypatch):
    """The constructors fill a padded block a strip of rows at a time: with strips of one row block, entries in any
    order give the same records as one strip, and a position given twice is found in whichever strip it falls."""
    import sparsekit.formats as formats
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((70, 90)) * (rng.random((70, 90)) < 0.4)).astype(np.float16)
    whole = TiledBitmap.from_dense(w)
    monkeypatch.setattr(formats, "_BITMAP_STRIP_ENTRIES", 16)
    rows, cols = np.nonzero(w)
    order = rng.permutation(rows.size)
    for a in (TiledBitmap.from_dense(w), TiledBitmap.from_coords(rows[order], cols[order], w[rows, cols][order], w.shape)):
        assert (a.stream == whole.stream).all() and (a.offsets == whole.offsets).all()
    with pytest.raises(ValueError, match="twice"):
        TiledBitmap.from_coords([60, 3, 60], [5, 1, 5], np.ones(3, np.float16), w.shape)


def test_zeros_are_not_stored():
    """A kept zero has no place in the layout (a pair is stored for its nonzero weights): the mask's zero
    entries are dropped, and so are zeros given as entries."""
    w = np.array([[0.0, 1.0], [2.0, 0.0]], dtype=np.float16)
    mask = np.array([[True, True], [False, False]])
    a = TiledBitmap.from_dense(w, mask)
    assert a.nnz == 1 and (a.to_dense() == np.where(mask, w, 0)).all()
    assert (a.mask() == np.array([[False, True], [False, False]])).all()
    b = TiledBitmap.from_coords([0, 1], [0, 1], np.array([0.0, -0.0], np.float16), (2, 2))
    assert b.nnz == 0 and b.stream.size == 8          # two fragments of bare bitmaps


def test_bad_streams_refused():
    a = TiledBitmap.from_dense(np.eye(20, dtype=np.float16))
    with pytest.raises(ValueError, match="offsets: expected shape"):
        TiledBitmap(a.stream, a.offsets[:-1].copy(), a.shape, a.value_dtype)
    with pytest.raises(ValueError, match="offsets: should start at 0"):
        TiledBitmap(a.stream[:-4].copy(), a.offsets, a.shape, a.value_dtype)
    with pytest.raises(TypeError, match="stream: dtype"):
        TiledBitmap(a.stream.astype(np.int64), a.offsets, a.shape, a.value_dtype)
    grown = a.stream.copy()
    grown[0] = np.uint32(0xFFFFFFFF)              # 31 more pairs: the record is too short
    with pytest.raises(ValueError, match="16-byte units"):
        TiledBitmap(grown, a.offsets, a.shape, a.value_dtype).validate(full=True)
    short = a.offsets.copy()
    short[1] = 0                                  # fragment 0 without even its bitmaps
    with pytest.raises(ValueError, match="shorter than the 16-byte unit"):
        TiledBitmap(a.stream, short, a.shape, a.value_dtype).validate(full=True)
    edge = np.zeros((20, 32), np.float16)
    edge[3, 25] = 1
    b = TiledBitmap.from_dense(edge)
    cut = TiledBitmap(b.stream, b.offsets, (20, 20), b.value_dtype)       # column 25 now past the edge
    with pytest.raises(ValueError, match="outside"):
        cut.validate(full=True)
    odd = np.zeros((16, 32), np.float16)
    odd[0, 2] = 1
    c = TiledBitmap.from_dense(odd)
    high = c.stream.copy()
    high[4] |= np.uint32(0x3C00) << np.uint32(16)     # the pair's high weight: column 3, past K = 3
    with pytest.raises(ValueError, match="outside"):
        TiledBitmap(high, c.offsets, (16, 3), c.value_dtype).validate(full=True)
    TiledBitmap(c.stream, c.offsets, (16, 3), c.value_dtype).validate(full=True)   # its low weight alone: fine
    zero = a.stream.copy()
    zero[4] = 0                                   # a marked pair of two zeros
    with pytest.raises(ValueError, match="both zero"):
        TiledBitmap(zero, a.offsets, a.shape, a.value_dtype).validate(full=True)
    nan = a.stream.copy()
    nan[4] = np.uint32(0x7E00)                    # the first pair of fragment 0: NaN in its low half
    with pytest.raises(ValueError, match="finite"):
        TiledBitmap(nan, a.offsets, a.shape, a.value_dtype).validate(full=True)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        TiledBitmap.from_dense(np.eye(4, dtype=np.float32))
    with pytest.raises(ValueError, match="twice"):
        TiledBitmap.from_coords([0, 0], [1, 1], np.ones(2, np.float16), (2, 2))


def run(a, b, linear, **tunables):
    if linear:
        got, want = gb.spmm_bitmap_linear(a, np.ascontiguousarray(b.T), **tunables), rb.spmm_bitmap_linear(a, b.T)
        return got.T, want.T
    return gb.spmm_bitmap(a, b, **tunables), rb.spmm_bitmap(a, b)


@settings(max_examples=25, deadline=None)
@given(data=st.data(), w=sparse_halves(max_rows=40, max_cols=100), linear=st.booleans())
def test_matches_reference(data, w, linear):
    n = data.draw(st.sampled_from([1, 3, 8, 9, 24]))
    b = data.draw(dense_arrays((w.shape[1], n), dtype=np.float32)).astype(w.dtype)
    tunables = dict(rows=data.draw(st.integers(1, 4)), slices=data.draw(st.integers(1, 3)), splits=data.draw(st.integers(1, 3)))
    tunables["stages"] = data.draw(st.sampled_from([4, 8] if tunables["rows"] * tunables["slices"] <= 8 else [4]))
    got, want = run(TiledBitmap.from_dense(w), b, linear, **tunables)
    assert_half_close(got, want, w, b)


@pytest.mark.parametrize("n, linear, density, tunables", [(8, True, 0.3, {}),
                                                          (16, False, 0.3, dict(slices=2, splits=2)),
                                                          (64, True, 0.3, dict(rows=2, splits=3)),
                                                          (8, True, 1.0, dict(rows=1, stages=4)),
                                                          (9, False, 0.9, dict(rows=2, slices=2, stages=8))])
def test_many_groups(n, linear, density, tunables):
    """Eight 32-column groups a row (the record pointer walks 16 fragments, the ring wraps and is refilled),
    70 rows (the last row block cut), K a multiple of 32 (the linear form reads X in place); dense fragments
    (528-byte records: three chunks, across the ring's end into its mirror)."""
    rng = np.random.default_rng(n)
    w = (rng.standard_normal((70, 256)) * (rng.random((70, 256)) < density)).astype(BF16)
    b = rng.standard_normal((256, n)).astype(BF16)
    got, want = run(TiledBitmap.from_dense(w), b, linear, **tunables)
    assert_half_close(got, want, w, b)


def test_prepared_weight_is_reused():
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((18, 40)) * (rng.random((18, 40)) < 0.5)).astype(np.float16)
    dev = gb.prepare(TiledBitmap.from_dense(w))
    for n in (1, 12):
        b = rng.standard_normal((40, n)).astype(np.float16)
        assert_half_close(gb.spmm_bitmap(dev, b), rb.spmm_bitmap(dev.host, b), w, b)


def test_bad_operands_refused():
    a = TiledBitmap.from_dense(np.eye(16, dtype=np.float16))
    with pytest.raises(ValueError, match=r"b: expected shape \(16, N\)"):
        gb.spmm_bitmap(a, np.ones((15, 2), np.float16))
    with pytest.raises(TypeError, match="b: dtype"):
        gb.spmm_bitmap(a, np.ones((16, 2), np.float32))
    with pytest.raises(ValueError, match="N = 65"):
        gb.spmm_bitmap(a, np.ones((16, 65), np.float16))
    with pytest.raises(ValueError, match=r"x: expected shape \(N, 16\)"):
        gb.spmm_bitmap_linear(a, np.ones((2, 15), np.float16))
    with pytest.raises(ValueError, match="splits"):
        gb.spmm_bitmap(a, np.ones((16, 2), np.float16), splits=0)
    with pytest.raises(ValueError, match="32 warps"):
        gb.spmm_bitmap(a, np.ones((16, 2), np.float16), rows=8, slices=8)
    with pytest.raises(ValueError, match="power of two"):
        gb.spmm_bitmap(a, np.ones((16, 2), np.float16), stages=6)
    with pytest.raises(ValueError, match="stages"):
        gb.spmm_bitmap(a, np.ones((16, 2), np.float16), stages=2)
    with pytest.raises(ValueError, match="48 KB"):
        gb.spmm_bitmap(a, np.ones((16, 2), np.float16), rows=4, slices=4, stages=8)
    with pytest.raises(TypeError, match="TiledBitmap"):
        gb.prepare(CSR.from_dense(np.eye(4, dtype=np.float16)))
