"""sparsekit/gpu/spmm_ell_rows.py equals sparsekit/reference/spmm_ell_rows.py under the simulator: the linear product for
``N`` from 1 to 20 by both kernels (``x^T`` in shared memory, or staged in global memory), float16 and bfloat16, rows of unequal length and
empty rows, torch-style int16 indices, rows reordered for the shared-memory banks (and the bank model that order
is built for); the densified weight exactly; the memory floor's read of the rows; operands refused by name.

Tolerance as in tests/test_spmm_tiled.py: float32 sums in different orders, one rounding each."""
from __future__ import annotations

import numpy as np
import pytest
from numba import cuda
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsekit.gpu import spmm_ell_rows as g
from sparsekit.reference import spmm_ell_rows as r
from sparsekit.checks import BFLOAT16
from tests.test_spmm_tiled import assert_close, sparse_halves


@settings(max_examples=25, deadline=None)
@given(w=sparse_halves(max_rows=20, max_cols=72), n=st.integers(1, 20), extra=st.sampled_from([0, 8]),
       signed=st.booleans(), shared=st.booleans(), data=st.data())
def test_linear_matches_reference(w, n, extra, signed, shared, data):
    values, indices = r.ell_rows_from_dense(w)
    if extra:                                            # more padding than the longest row needs
        values, indices = r.ell_rows_from_dense(w, values.shape[1] + extra)
    seed = data.draw(st.integers(0, 2**32 - 1))
    x = np.random.default_rng(seed).standard_normal((n, w.shape[1])).astype(w.dtype)
    got = g.spmm_ell_rows_linear(values, indices.view(np.int16) if signed else indices, w.shape[1], x,
                                 x_in_shared=shared)                  # both kernels: x^T in shared memory or L1
    want = r.spmm_ell_rows_linear(values, indices, w.shape[1], x)
    assert_close(np.asarray(got).T, want.T, w, x.T)


@settings(max_examples=4, deadline=None)
@given(n=st.sampled_from([1, 3]), dtype=st.sampled_from([np.float16, BFLOAT16]), seed=st.integers(0, 2**32 - 1))
def test_shared_kernel_pipelines_steps_and_rows(n, dtype, seed):
    """The shared-memory kernel's pipeline: 2 warps a block, so each warp takes many rows, of 0 to 3 steps
    (unroll 1: 32 chunks, 256 entries a step), the next step's loads issued before the last one is used."""
    rng = np.random.default_rng(seed)
    m, k = 37, 700
    keep = rng.random((m, k)) < rng.choice([0.0, 0.05, 0.5, 0.95], size=(m, 1))   # empty to 3-step rows
    w = np.where(keep, rng.standard_normal((m, k)), 0).astype(dtype)
    values, indices = r.ell_rows_from_dense(w)
    x = rng.standard_normal((n, k)).astype(dtype)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(g, "SHARED_WARPS", 2)
        got = g.spmm_ell_rows_linear(values, indices, k, x, unroll=1, x_in_shared=True)
    assert_close(np.asarray(got).T, r.spmm_ell_rows_linear(values, indices, k, x).T, w, x.T)


def test_gather_passes_model():
    """The bank model: 32 columns in distinct banks take one pass; 32 distinct words of one bank 32 passes;
    lanes reading one word share its pass; padding reads nothing; rows' gathers are averaged."""
    k = 4096
    spread = np.arange(0, 64, 2, dtype=np.uint16)                     # words 0..31: banks 0..31
    one_bank = np.arange(0, 64 * 32, 64, dtype=np.uint16)             # words 0, 32, 64, ...: all bank 0
    same_word = np.tile(np.array([6, 7], dtype=np.uint16), 16)         # word 3, 32 lanes
    def row(first):                                                    # a row of one gather group: positions 8 L
        out = np.full(256, k, dtype=np.uint16)
        out[::8] = first
        return out
    assert r.gather_passes(row(spread)[None], k) == 1
    assert r.gather_passes(row(one_bank)[None], k) == 32
    assert r.gather_passes(row(same_word)[None], k) == 1
    assert r.gather_passes(np.stack([row(spread), row(one_bank)]), k) == 16.5
    assert [list(grp[:3]) for grp in r.gather_groups(264)[:2]] == [[0, 8, 16], [1, 9, 17]]
    assert sorted(grp.size for grp in r.gather_groups(264)) == [1] * 8 + [32] * 8   # a last round of one lane


@settings(max_examples=25, deadline=None)
@given(w=sparse_halves(max_rows=12, max_cols=700), extra=st.sampled_from([0, 8, 264]), signed=st.booleans())
def test_bank_balanced_rows_hold_the_same_entries(w, extra, signed):
    """Each row keeps its entries (column and value together), reordered; padding stays padding."""
    values, indices = r.ell_rows_from_dense(w)
    values, indices = r.ell_rows_from_dense(w, values.shape[1] + extra)
    indices = indices.view(np.int16) if signed else indices
    v, i = r.bank_balanced(values, indices, w.shape[1])
    assert v.dtype == values.dtype and i.dtype == indices.dtype and v.shape == values.shape
    assert v.flags.c_contiguous and i.flags.c_contiguous
    for row in range(w.shape[0]):
        assert sorted(zip(i[row].tolist(), v[row].view(np.uint16).tolist())) == \
            sorted(zip(indices[row].tolist(), values[row].view(np.uint16).tolist()))
    assert np.array_equal(r.densify_ell_rows(v, i.view(np.uint16), w.shape[1]), w)


@settings(max_examples=6, deadline=None)
@given(m=st.integers(0, 200), width=st.sampled_from([8, 16, 264, 520]), seed=st.integers(0, 2**32 - 1))
def test_read_rows_reads_every_word_once(m, width, seed):
    """The memory floor's read (the product's grid and loads, no product) folds every word of the rows exactly
    once (a word read twice would cancel in the XOR, one not read or out of the rows would change it): rows of one
    to three rounds of 32 chunks, more rows than the simulator's grid has warps."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 2**16, (m, width), dtype=np.uint16)
    indices = rng.integers(0, 2**16, (m, width), dtype=np.uint16)
    got = np.bitwise_xor.reduce(np.asarray(g.read_rows(values, indices, 65535)), initial=np.uint32(0))
    assert int(got) == r.read_rows(values, indices)


@settings(max_examples=20, deadline=None)
@given(w=sparse_halves(max_rows=9, max_cols=900), extra=st.sampled_from([0, 8, 248]), signed=st.booleans())
def test_gather_order_kernel_equals_reference(w, extra, signed):
    """The kernel's order (one thread a row) is the reference's, entry for entry: rows of one to several
    rounds of 256 entries, a last round of any width, padding, empty rows."""
    _, indices = r.ell_rows_from_dense(w)
    _, indices = r.ell_rows_from_dense(w, indices.shape[1] + extra)
    indices = indices.view(np.int16) if signed else indices
    got = np.asarray(g.gather_order(indices, w.shape[1]))
    assert got.dtype == np.int32 and np.array_equal(got, r.gather_order(indices, w.shape[1]))


@settings(max_examples=8, deadline=None)
@given(w=sparse_halves(max_rows=9, max_cols=600), signed=st.booleans())
def test_bank_balanced_on_the_device_equals_reference(w, signed):
    """The device's reordered rows are the reference's, values (float16 or bfloat16) and columns alike, in the
    dtypes given."""
    values, indices = r.ell_rows_from_dense(w)
    indices = indices.view(np.int16) if signed else indices
    got_values, got_indices = g.bank_balanced(values, indices, w.shape[1])
    want_values, want_indices = r.bank_balanced(values, indices, w.shape[1])
    assert got_values.dtype == values.dtype and got_indices.dtype == indices.dtype
    assert np.array_equal(got_values.view(np.uint16), want_values.view(np.uint16))
    assert np.array_equal(got_indices, want_indices)


def test_gather_order_refuses_bad_operands():
    for order in (g.gather_order, r.gather_order):
        with pytest.raises(ValueError, match="k: columns"):
            order(np.zeros((2, 8), np.uint16), -1)
    with pytest.raises(TypeError, match="indices: dtype"):
        g.gather_order(np.zeros((2, 8), np.int32), 8)
    for order in (g.gather_order, r.gather_order):                    # the groups assume whole chunks of 8
        with pytest.raises(ValueError, match="multiple of 8"):
            order(np.zeros((2, 12), np.uint16), 8)


@pytest.mark.parametrize("k, sparsity", [(4096, 0.5), (4096, 0.8), (14336, 0.8), (4096, 0.9)])
def test_bank_balanced_rows_gather_in_fewer_passes(k, sparsity):
    """Random columns in ascending order take about 3 passes a gather; balanced, at most 1.4 (under half)."""
    rng = np.random.default_rng(k)
    kept = int(k * (1 - sparsity))
    indices = np.full((16, -(-kept // 8) * 8), k, dtype=np.uint16)
    for row in indices:
        row[:kept] = np.sort(rng.choice(k, kept, replace=False))
    before = r.gather_passes(indices, k)
    after = r.gather_passes(r.bank_balanced(indices, indices, k)[1], k)
    assert before > 2.7 and after <= 1.4 and after < 0.5 * before, (before, after)


@settings(max_examples=6, deadline=None)
@given(dtype=st.sampled_from([np.float16, BFLOAT16]), seed=st.integers(0, 2**32 - 1))
def test_shared_kernel_on_bank_balanced_rows(dtype, seed):
    """The N = 1 kernel on balanced rows (several rounds of 256 entries, padding at every position of the
    last) equals the reference on the rows as built."""
    rng = np.random.default_rng(seed)
    m, k = 11, 1500
    w = np.where(rng.random((m, k)) < rng.choice([0.05, 0.5], size=(m, 1)), rng.standard_normal((m, k)), 0)
    w = w.astype(dtype)
    values, indices = r.ell_rows_from_dense(w)
    x = rng.standard_normal((1, k)).astype(dtype)
    got = g.spmm_ell_rows_linear(*r.bank_balanced(values, indices, k), k, x)
    assert_close(np.asarray(got).T, r.spmm_ell_rows_linear(values, indices, k, x).T, w, x.T)


@pytest.mark.parametrize("dtype, offset", [(np.float16, 0), (np.float16, 1), (np.float16, 8), (BFLOAT16, None)])
def test_x_copied_in_sixteen_byte_loads(dtype, offset):
    """At N = 1 with K % 8 == 0 an x on a 16-byte boundary (a device view 0 or 8 halves into its buffer, or a host
    array) is copied to shared memory in 16-byte loads, four a thread in flight (blocks of 2 warps here: K = 2600
    takes a second round with some loads past K); one element off the boundary, half by half. Each equals the
    reference."""
    rng = np.random.default_rng(offset)
    m, k = 9, 2600
    w = np.where(rng.random((m, k)) < 0.1, rng.standard_normal((m, k)), 0).astype(dtype)
    values, indices = r.ell_rows_from_dense(w)
    buffer = rng.standard_normal((1, k + 16)).astype(dtype)
    xh = buffer[:, offset or 0:(offset or 0) + k]
    x = xh if offset is None else cuda.to_device(buffer)[:, offset:offset + k]   # (a device view keeps its offset)
    built = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(g, "SHARED_WARPS", 2)
        patch.setattr(g, "_shared_kernel", lambda *key, make=g._shared_kernel: built.append(key[-1]) or make(*key))
        got = g.spmm_ell_rows_linear(values, indices, k, x)
    assert built == [offset != 1]
    assert_close(np.asarray(got).T, r.spmm_ell_rows_linear(values, indices, k, xh).T, w, xh.T)


@settings(max_examples=25, deadline=None)
@given(w=sparse_halves(max_rows=20, max_cols=72))
def test_densify_is_exact(w):
    values, indices = r.ell_rows_from_dense(w)
    got = g.densify_ell_rows(values, indices, w.shape[1])
    np.testing.assert_array_equal(np.asarray(got).view(np.uint16), (w + np.zeros((), w.dtype)).view(np.uint16))
    out = np.full(w.shape, np.nan, w.dtype)
    np.testing.assert_array_equal(np.asarray(g.densify_ell_rows(values, indices, w.shape[1], out=out)), got)


def test_reference_round_trip_and_padding():
    w = np.array([[0, 1.5, 0, -2], [0, 0, 0, 0], [3, 0, 0, 0]], dtype=np.float16)
    values, indices = r.ell_rows_from_dense(w)
    assert values.shape == (3, 8) and indices[1].tolist() == [4] * 8        # the empty row: padding only
    np.testing.assert_array_equal(r.densify_ell_rows(values, indices, 4), w)
    with pytest.raises(ValueError, match="multiple of 8"):
        r.ell_rows_from_dense(w, 12)


def test_bad_operands_are_named():
    w = np.eye(8, dtype=np.float16)
    values, indices = r.ell_rows_from_dense(w)
    x = np.ones((2, 8), np.float16)
    with pytest.raises(ValueError, match="multiple of 8"):
        g.spmm_ell_rows_linear(values[:, :4], indices[:, :4], 8, x)
    with pytest.raises(ValueError, match="one shape"):
        g.spmm_ell_rows_linear(values, indices[:4], 8, x)
    with pytest.raises(TypeError, match="x: dtype"):
        g.spmm_ell_rows_linear(values, indices, 8, x.astype(np.float32))
    with pytest.raises(ValueError, match=r"x: expected shape \(N, 8\)"):
        g.spmm_ell_rows_linear(values, indices, 8, np.ones((2, 7), np.float16))
    with pytest.raises(ValueError, match="takes 1 to 64"):
        g.spmm_ell_rows_linear(values, indices, 8, np.ones((65, 8), np.float16))
    with pytest.raises(ValueError, match="k: columns"):
        g.densify_ell_rows(values, indices, -1)
    with pytest.raises(TypeError, match="indices: dtype"):
        g.densify_ell_rows(values, indices.astype(np.int32), 8)


@pytest.mark.parametrize("k, in_shared", [(64, True), (64, False), (67, False)])
def test_densify_every_kernel(k, in_shared):
    """Rows built in shared memory (K % 8 == 0), zeroed in place by 16-byte stores (K % 8 == 0) or half by
    half: each exact over a NaN-filled output, with a block's last rows past M."""
    rng = np.random.default_rng(k)
    w = np.where(rng.random((9, k)) < 0.3, rng.standard_normal((9, k)), 0).astype(np.float16)
    values, indices = r.ell_rows_from_dense(w)
    out = np.full(w.shape, np.nan, np.float16)
    got = g.densify_ell_rows(values, indices, k, out=out, in_shared=in_shared)
    np.testing.assert_array_equal(np.asarray(got), w)
    if not in_shared and k % 8:
        with pytest.raises(ValueError, match="in_shared"):
            g.densify_ell_rows(values, indices, k, in_shared=True)
