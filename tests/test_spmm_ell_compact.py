"""sparsekit/reference/spmm_ell_compact.py keeps a weight's entries (padded ELL rows and dense round trips, chunks
split where columns jump past 255, greedy packing, each chunk's slots reordered for the shared-memory banks, and
the bank model that order lowers), and sparsekit/gpu/spmm_ell_compact.py equals it under the simulator: the
N = 1 product, float16 and bfloat16, rows of unequal length and empty rows, slots in any order, several rows a
warp and several rounds of chunks a row, x copied in 16-byte loads or half by half, K up to 65535; the compact
product equals the padded ELL rows' product of the same weight; operands refused by name.

Tolerance as in tests/test_spmm_ell_rows.py: float32 sums in different orders, one rounding each."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import cuda

from sparsekit.checks import BFLOAT16
from sparsekit.gpu import spmm_ell_compact as g
from sparsekit.reference import spmm_ell_compact as c
from sparsekit.reference import spmm_ell_rows as r
from spmm_close import assert_half_close as assert_close
from strategies import HALVES, sparse_halves


def _shuffled_rows(w, extra, seed, signed):
    """``w``'s padded ELL rows with ``extra`` more padding and each row's entries (padding included) in a random
    order, columns as int16 bits when ``signed``."""
    values, indices = r.ell_rows_from_dense(w)
    values, indices = r.ell_rows_from_dense(w, values.shape[1] + extra)
    order = np.argsort(np.random.default_rng(seed).random(values.shape), axis=1)
    values, indices = (np.take_along_axis(a, order, 1) for a in (values, indices))
    return values, indices.view(np.int16) if signed else indices


def _entries(values, indices, k):
    """Each row's stored ``(column, value bits)``, sorted."""
    cols, bits = indices.view(np.uint16), values.view(np.uint16)
    return [sorted((int(cc), int(b)) for cc, b in zip(cols[i], bits[i]) if cc < k) for i in range(len(cols))]


def _assert_greedy(offsets, bases, k):
    """Every chunk of a row but its last used one is full, or closed because the next column is past its base +
    255; used chunks come first; at K <= 256 a row has exactly ceil(entries / 8) chunks."""
    m, chunks = bases.shape
    entries = (offsets.reshape(m, chunks, 8) != 0).sum(axis=2) + 1    # a used chunk: its base and nonzero offsets
    for i in range(m):
        used = [j for j in range(chunks) if bases[i, j] != c.UNUSED_BASE]
        assert used == list(range(len(used)))
        for j in used[:-1]:
            assert entries[i, j] == 8 or int(bases[i, j + 1]) > int(bases[i, j]) + 255, (i, j)


def _chunk_entries(values, offsets, bases):
    """Each used chunk's stored ``(column, value bits)``, sorted: ``{(row, chunk): [...]}``."""
    m, chunks = bases.shape
    off, bits = offsets.reshape(m, chunks, 8), values.view(np.uint16).reshape(m, chunks, 8)
    out = {}
    for i in range(m):
        for j in range(chunks):
            base = int(bases.view(np.uint16)[i, j])
            if base != c.UNUSED_BASE:
                slots = [s for s in range(8) if off[i, j, s] != 0] + [int(np.flatnonzero(off[i, j] == 0)[0])]
                out[i, j] = sorted((base + int(off[i, j, s]), int(bits[i, j, s])) for s in slots)
    return out


@settings(max_examples=40, deadline=None)
@given(w=sparse_halves(max_rows=12, max_cols=700), extra=st.sampled_from([0, 8, 24]), signed=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_round_trips_keep_every_entry(w, extra, signed, seed):
    """ELL rows in any order -> compact -> ELL rows: the same (column, value) pairs a row, now ascending; -> dense:
    the weight. The chunks are greedy and valid, 3.25 bytes a slot; at K <= 256 (no column jump can split a
    chunk) the width is the ELL width rounded to 8."""
    m, k = w.shape
    values, indices = _shuffled_rows(w, extra, seed, signed)
    compact = c.from_ell_rows(values, indices, k)
    c.check_compact(*compact, k)
    cv, co, cb = compact
    assert cv.dtype == w.dtype and co.dtype == np.uint8 and cb.dtype == np.uint16 and cb.shape[1] * 8 == cv.shape[1]
    assert c.nbytes(*compact) == 3.25 * cv.size
    _assert_greedy(co, cb, k)
    if k <= 256:
        assert cv.shape[1] == r.ell_rows_from_dense(w)[0].shape[1]
    back_values, back_indices = c.to_ell_rows(*compact, k)
    assert back_indices.dtype == np.uint16 and back_values.shape[1] % 8 == 0
    assert _entries(back_values, back_indices, k) == _entries(values, indices, k)
    kept = back_indices < k
    assert (np.diff(back_indices.astype(np.int64), axis=1)[kept[:, 1:]] > 0).all()     # ascending, padding last
    assert np.array_equal(c.to_dense(*compact, k).view(np.uint16), w.view(np.uint16))
    assert np.array_equal(c.to_dense(*c.from_dense(w), k).view(np.uint16), w.view(np.uint16))
    ascending = c.from_ell_rows(values, indices, k, balanced=False)
    assert np.array_equal(c.to_dense(*ascending, k).view(np.uint16), w.view(np.uint16))
    off = ascending[1].reshape(m, -1, 8).astype(np.int64)
    assert ((np.diff(off, axis=2) > 0) | (off[:, :, 1:] == 0)).all()            # slots ascending, unused last


@settings(max_examples=30, deadline=None)
@given(w=sparse_halves(max_rows=12, max_cols=1500), signed=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_slot_order_keeps_each_chunks_entries(w, signed, seed):
    """The balanced rows (the default) are the ascending rows with each chunk's slots permuted: the same bases,
    the same (column, value) pairs a chunk, used slots first (valid rows); bank_balanced of the ascending rows
    gives them, through slot_order (int8, a permutation of each chunk's slots; of no rows, none)."""
    m, k = w.shape
    values, indices = _shuffled_rows(w, 8, seed, signed)
    balanced = c.from_ell_rows(values, indices, k)
    ascending = c.from_ell_rows(values, indices, k, balanced=False)
    c.check_compact(*balanced, k)
    assert np.array_equal(balanced[2], ascending[2])
    assert _chunk_entries(*balanced) == _chunk_entries(*ascending)
    order = c.slot_order(*ascending, k)
    assert order.dtype == np.int8 and order.shape == ascending[0].shape
    assert (np.sort(order.reshape(-1, 8), axis=1) == np.arange(8)).all()
    assert c.slot_order(*(a[:0] for a in ascending), k).shape == (0, order.shape[1])     # no rows
    again = c.bank_balanced(*ascending, k)
    assert all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(again, balanced))
    assert again[0].dtype == w.dtype and again[2] is not ascending[2]


def test_gather_passes_model():
    """The compact rows' bank model is the padded ELL rows' on the slots' columns (lane L reads slot p of chunk
    32 s + L): 32 chunks of columns 64 L + 2 j (bank j, distinct words) take 32 passes a gather in ascending
    slots, 4 (the least: 256 entries on 8 banks) in slot_order; unused slots read nothing."""
    k = 2048
    w = np.zeros((2, k), np.float16)
    w[0, (64 * np.arange(32)[:, None] + 2 * np.arange(8)).ravel()] = 1
    w[1, [0, 2]] = 1                                                    # two slots of one gather group used
    ascending = c.from_ell_rows(*r.ell_rows_from_dense(w), k, balanced=False)
    balanced = c.from_ell_rows(*r.ell_rows_from_dense(w), k)
    assert c.gather_passes(*(a[:1] for a in ascending), k) == 32
    assert c.gather_passes(*(a[:1] for a in balanced), k) == 4
    assert c.gather_passes(*(a[1:] for a in ascending), k) == 1
    assert c.gather_passes(*ascending, k) == (32 * 8 + 2) / 10


@settings(max_examples=10, deadline=None)
@given(m=st.integers(1, 4), k=st.integers(2048, 4096), sparsity=st.floats(0.5, 0.9), seed=st.integers(0, 2**32 - 1))
def test_slot_order_lowers_the_bank_passes(m, k, sparsity, seed):
    """Rows of uniform random sparsity (at least 25 chunks a row): the balanced slots take no more passes a
    gather, on the mean, than ascending ones (the greedy order can lose on a gather group of few chunks)."""
    rng = np.random.default_rng(seed)
    w = np.where(rng.random((m, k)) >= sparsity, 1, 0).astype(np.float16)
    values, indices = r.ell_rows_from_dense(w)
    assert c.gather_passes(*c.from_ell_rows(values, indices, k), k) <= \
        c.gather_passes(*c.from_ell_rows(values, indices, k, balanced=False), k)


@pytest.mark.parametrize("sparsity", [0.5, 0.8, 0.9])
def test_slot_order_passes_at_4096_columns(sparsity):
    """Seeded 4096-column rows: ascending slots take about 3 passes a gather, balanced ones under 2."""
    rng = np.random.default_rng(4096)
    k = 4096
    w = np.where(rng.random((16, k)) >= sparsity, 1, 0).astype(np.float16)
    values, indices = r.ell_rows_from_dense(w)
    assert c.gather_passes(*c.from_ell_rows(values, indices, k, balanced=False), k) > 2.8
    assert c.gather_passes(*c.from_ell_rows(values, indices, k), k) < 2.0


@st.composite
def _wide_rows(draw, *, max_rows=6, max_entries=40):
    """Padded ELL rows of a weight up to 65535 columns wide with few entries a row (so columns jump by hundreds),
    some rows full of close columns (chunks of 8 between the jumps)."""
    k = draw(st.integers(256, c.UNUSED_BASE))
    m = draw(st.integers(1, max_rows))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = draw(st.sampled_from(HALVES))
    width = 8 * -(-max_entries // 8)
    values = np.zeros((m, width), dtype)
    indices = np.full((m, width), k, np.uint16)
    for i in range(m):
        n = int(rng.integers(0, max_entries + 1))
        if rng.random() < 0.5:                                           # runs of close columns between jumps
            starts = rng.choice(k - 16, size=max(n // 8, 1), replace=False)
            cols = np.unique(np.concatenate([s + np.arange(8) for s in starts]))[:n]
        else:
            cols = rng.choice(k, size=n, replace=False)
        values[i, :cols.size] = rng.uniform(0.25, 2, cols.size) * rng.choice([-1, 1], cols.size)
        indices[i, :cols.size] = cols
    return values, indices, k


@settings(max_examples=40, deadline=None)
@given(rows=_wide_rows())
def test_chunks_split_where_columns_jump(rows):
    """Up to 65535 columns, few entries: a chunk closes where the next column is past its base + 255 (so rows
    need more chunks than entries / 8), and every entry comes back."""
    values, indices, k = rows
    compact = c.from_ell_rows(values, indices, k)
    c.check_compact(*compact, k)
    _assert_greedy(compact[1], compact[2], k)
    assert _entries(*c.to_ell_rows(*compact, k), k) == _entries(values, indices, k)
    x = np.random.default_rng(k).standard_normal((2, k)).astype(values.dtype)
    w = r.densify_ell_rows(values, indices, k)
    assert_close(c.spmm_ell_compact_linear(*compact, k, x).T, r.spmm_ell_rows_linear(values, indices, k, x).T, w, x.T)


@settings(max_examples=20, deadline=None)
@given(w=sparse_halves(max_rows=20, max_cols=300), signed=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_kernel_matches_reference(w, signed, seed):
    """The N = 1 kernel (both dtypes, any K: x copied in 16-byte loads when K % 8 == 0) equals the reference,
    which equals the padded ELL rows' product of the same weight."""
    m, k = w.shape
    values, indices = _shuffled_rows(w, 0, seed, signed)
    compact = c.from_ell_rows(values, indices, k)
    x = np.random.default_rng(seed).standard_normal((1, k)).astype(w.dtype)
    want = c.spmm_ell_compact_linear(*compact, k, x)
    assert_close(want.T, r.spmm_ell_rows_linear(values, indices, k, x).T, w, x.T)
    got = g.spmm_ell_compact_linear(*compact, k, x)
    assert got.dtype == w.dtype and got.shape == (1, m)
    assert_close(np.asarray(got).T, want.T, w, x.T)


@settings(max_examples=4, deadline=None)
@given(dtype=st.sampled_from(HALVES), seed=st.integers(0, 2**32 - 1))
def test_kernel_pipelines_chunks_and_rows(dtype, seed):
    """2 warps a block, so each warp takes many rows, of 0 to 3 rounds of 32 chunks (unroll 1), the next round's
    loads issued after the last one is used; bases passed as int16 bits, as a torch layer holds them."""
    rng = np.random.default_rng(seed)
    m, k = 37, 700
    keep = rng.random((m, k)) < rng.choice([0.0, 0.05, 0.5, 0.95], size=(m, 1))
    w = np.where(keep, rng.standard_normal((m, k)), 0).astype(dtype)
    cv, co, cb = c.from_dense(w)
    x = rng.standard_normal((1, k)).astype(dtype)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(g, "SHARED_WARPS", 2)
        got = g.spmm_ell_compact_linear(cv, co, cb.view(np.int16), k, x, unroll=1)
    assert_close(np.asarray(got).T, c.spmm_ell_compact_linear(cv, co, cb, k, x).T, w, x.T)


@pytest.mark.parametrize("dtype, offset", [(np.float16, 0), (np.float16, 1), (np.float16, 8), (BFLOAT16, None)])
def test_x_copied_in_sixteen_byte_loads(dtype, offset):
    """With K % 8 == 0 an x on a 16-byte boundary (a device view 0 or 8 halves into its buffer, or a host array) is
    copied to shared memory in 16-byte loads; one element off the boundary, half by half. Each equals the
    reference (blocks of 2 warps, rows whose columns jump past 255)."""
    rng = np.random.default_rng(offset)
    m, k = 9, 2600
    w = np.where(rng.random((m, k)) < 0.02, rng.standard_normal((m, k)), 0).astype(dtype)
    compact = c.from_dense(w)
    buffer = rng.standard_normal((1, k + 16)).astype(dtype)
    xh = buffer[:, offset or 0:(offset or 0) + k]
    x = xh if offset is None else cuda.to_device(buffer)[:, offset:offset + k]
    built = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(g, "SHARED_WARPS", 2)
        patch.setattr(g, "_kernel", lambda *key, make=g._kernel: built.append(key[-1]) or make(*key))
        got = g.spmm_ell_compact_linear(*compact, k, x)
    assert built == [offset != 1]
    assert_close(np.asarray(got).T, c.spmm_ell_compact_linear(*compact, k, xh).T, w, xh.T)


@pytest.mark.parametrize("k", [65535, 65528])
def test_kernel_at_the_widest_k(k):
    """K = 65535 (x half by half, the last column 65534 next to the unused base 0xFFFF) and 65528 (16-byte
    loads): few entries a row, each chunk split by the column jumps; the last column stored."""
    rng = np.random.default_rng(k)
    m = 3
    w = np.where(rng.random((m, k)) < 0.0005, rng.standard_normal((m, k)), 0).astype(BFLOAT16)
    w[:, k - 1] = 1
    compact = c.from_dense(w)
    assert compact[2].shape[1] > -(-int((w != 0).sum(axis=1).max()) // 8)   # split chunks
    x = rng.standard_normal((1, k)).astype(BFLOAT16)
    got = g.spmm_ell_compact_linear(*compact, k, x)
    assert_close(np.asarray(got).T, c.spmm_ell_compact_linear(*compact, k, x).T, w, x.T)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")   # the kernel computes 0 * inf, then drops it
def test_zero_weights_and_unused_slots_add_nothing():
    """A stored +0.0 weight is skipped, so is every unused slot (which points at its chunk's base): an infinite x
    there leaves y finite, in the reference and the kernel alike (the padded ELL rows' product gives NaN)."""
    k = 40
    values = np.zeros((2, 8), np.float16)
    indices = np.full((2, 8), k, np.uint16)
    values[0, :3], indices[0, :3] = (0, 2, 3), (5, 6, 30)         # column 5: a stored +0.0
    values[1, :1], indices[1, :1] = 4, 7                           # one entry: 7 unused slots at column 7
    compact = c.from_ell_rows(values, indices, k)
    assert _entries(*c.to_ell_rows(*compact, k), k) == _entries(values, indices, k)   # the zero is kept
    x = np.ones((1, k), np.float16)
    x[0, 5] = np.inf
    want = np.array([[5, 4]], np.float16)
    assert np.array_equal(c.spmm_ell_compact_linear(*compact, k, x), want)
    assert np.array_equal(np.asarray(g.spmm_ell_compact_linear(*compact, k, x)), want)
    with np.errstate(invalid="ignore"):
        assert np.isnan(r.spmm_ell_rows_linear(values, indices, k, x)).any()


def test_compact_rows_keeps_the_kind():
    """NumPy rows give NumPy compact rows, Numba device arrays give device arrays, both the reference's."""
    w = np.eye(12, 600, 3, dtype=np.float16) + np.eye(12, 600, 400, dtype=np.float16)
    values, indices = r.ell_rows_from_dense(w)
    want = c.from_ell_rows(values, indices, 600)
    for got in (g.compact_rows(values, indices, 600),
                [a.copy_to_host() for a in g.compact_rows(cuda.to_device(values), cuda.to_device(indices), 600)]):
        assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(got, want))


def test_compact_rows_of_tensors():
    """Tensors come back as tensors of the values' device: values in their dtype, offsets uint8, bases int16 bits."""
    torch = pytest.importorskip("torch")
    w = np.eye(12, 600, 3).astype(BFLOAT16)
    values, indices = r.ell_rows_from_dense(w)
    tv = torch.from_numpy(values.view(np.int16)).view(torch.bfloat16)
    ti = torch.from_numpy(indices.view(np.int16))
    got = g.compact_rows(tv, ti, 600)
    want = c.from_ell_rows(values, indices, 600)
    assert [t.dtype for t in got] == [torch.bfloat16, torch.uint8, torch.int16]
    assert all(t.device == tv.device for t in got)
    for t, a in zip(got, want):
        assert np.array_equal(t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy(),
                              a.view(np.int16) if a.dtype != np.uint8 else a)


def _valid():
    """Compact rows of a 2 x 300 weight: row 0 two chunks (columns 1, 2 | 290), row 1 one chunk and padding."""
    w = np.zeros((2, 300), np.float16)
    w[0, [1, 2, 290]] = 1, 2, 3
    w[1, 7] = 4
    return c.from_dense(w)


@pytest.mark.parametrize("break_it, match", [
    (lambda v, o, b: b.__setitem__((0, 1), 300), "bases: chunk 1 of row 0 starts at column 300"),
    (lambda v, o, b: (b.__setitem__((0, 0), c.UNUSED_BASE), v.__setitem__((0, slice(0, 8)), 0),
                      o.__setitem__((0, slice(0, 8)), 0)), "used chunk .1. after an unused one"),
    (lambda v, o, b: v.__setitem__((1, 9), 1), "unused chunk 1 of row 1 must be all zero"),
    (lambda v, o, b: o.__setitem__((0, 3), 5), r"used slot \(3, offset 5\) after an unused one"),
    (lambda v, o, b: o.__setitem__((0, 1), 0), "unused slot 1 of chunk 0 of row 0 holds nonzero bits"),
    (lambda v, o, b: (o.__setitem__((0, 2), 1), v.__setitem__((0, 2), 5)),
     "distinct within a chunk, chunk 0 of row 0 holds offset 1 twice"),
    (lambda v, o, b: (o.__setitem__((0, slice(0, 8)), np.arange(1, 9)), v.__setitem__((0, slice(0, 8)), 1)),
     "chunk 0 of row 0 has no slot of offset 0"),
    (lambda v, o, b: (b.__setitem__((0, 1), 200), o.__setitem__((0, 9), 100), v.__setitem__((0, 9), 1)),
     r"column 200 \+ 100 = 300, past K - 1 = 299"),
    (lambda v, o, b: b.__setitem__((0, 1), 2), "not past the previous chunk's last column 2"),
])
def test_check_compact_names_the_broken_rule(break_it, match):
    values, offsets, bases = _valid()
    c.check_compact(values, offsets, bases, 300)
    break_it(values, offsets, bases)
    with pytest.raises(ValueError, match=match):
        c.check_compact(values, offsets, bases, 300)
    with pytest.raises(ValueError, match=match):                      # every public function checks first
        c.to_ell_rows(values, offsets, bases, 300)


def test_slots_in_any_order_are_valid():
    """A chunk's used slots may come in any order, the base's own (offset 0, here a stored zero) anywhere among
    them: the entries, the ascending padded rows and the product (reference and kernel) do not change."""
    k = 300
    values, offsets, bases = _valid()
    values[0, 0] = 0                                                    # column 1 (the base): a stored zero
    x = np.random.default_rng(k).standard_normal((1, k)).astype(np.float16)
    want, want_y = c.to_ell_rows(values, offsets, bases, k), c.spmm_ell_compact_linear(values, offsets, bases, k, x)
    values[0, :2], offsets[0, :2] = values[0, 1::-1].copy(), offsets[0, 1::-1].copy()
    assert list(offsets[0, :3]) == [1, 0, 0]
    c.check_compact(values, offsets, bases, k)
    got = c.to_ell_rows(values, offsets, bases, k)
    assert all(np.array_equal(a.view(np.uint16), b.view(np.uint16)) for a, b in zip(got, want))
    assert list(got[1][0, :3]) == [1, 2, 290]
    assert np.array_equal(c.spmm_ell_compact_linear(values, offsets, bases, k, x), want_y)
    assert np.array_equal(np.asarray(g.spmm_ell_compact_linear(values, offsets, bases, k, x)), want_y)


def test_bad_operands_are_named():
    values, offsets, bases = _valid()
    x = np.ones((1, 300), np.float16)
    for product in (c.spmm_ell_compact_linear, g.spmm_ell_compact_linear):
        with pytest.raises(ValueError, match="k: columns"):
            product(values, offsets, bases, 70000, x)
        with pytest.raises(ValueError, match="whole chunks of 8"):
            product(values[:, :12], offsets[:, :12], bases, 300, x)
        with pytest.raises(ValueError, match="values, offsets: must be 2-D of one shape"):
            product(values, offsets[:1], bases, 300, x)
        with pytest.raises(ValueError, match=r"bases: expected shape \(2, 2\)"):
            product(values, offsets, bases[:, :1], 300, x)
        with pytest.raises(TypeError, match="offsets: dtype"):
            product(values, offsets.astype(np.uint16), bases, 300, x)
        with pytest.raises(TypeError, match="x: dtype"):
            product(values, offsets, bases, 300, x.astype(np.float32))
    with pytest.raises(ValueError, match=r"x: expected shape \(N, 300\)"):
        c.spmm_ell_compact_linear(values, offsets, bases, 300, np.ones((1, 299), np.float16))
    with pytest.raises(ValueError, match=r"takes N = 1 only"):
        g.spmm_ell_compact_linear(values, offsets, bases, 300, np.ones((2, 300), np.float16))
    with pytest.raises(TypeError, match="bases: dtype"):
        g.spmm_ell_compact_linear(values, offsets, bases.astype(np.int32), 300, x)
    ell_values, ell_indices = r.ell_rows_from_dense(np.eye(4, 9, dtype=np.float16))
    with pytest.raises(ValueError, match="columns must be below 9"):
        c.from_ell_rows(ell_values, np.where(ell_indices == 9, 10, ell_indices).astype(np.uint16), 9)
    ell_indices[0, 1] = ell_indices[0, 0]
    with pytest.raises(ValueError, match="row 0 stores column 0 twice"):
        c.from_ell_rows(ell_values, ell_indices, 9)
