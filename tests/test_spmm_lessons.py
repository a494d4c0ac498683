"""sparsekit/gpu/spmm_lessons.py equals sparsekit/reference/spmm.py (runs on the CUDA simulator without a GPU)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparsekit.gpu import spmm_lessons as les
from sparsekit.reference.spmm import spmm_csr
from sparsekit.formats import CSR
from tests.spmm_close import assert_spmm_close
from tests.strategies import dense_arrays, dims, shapes_2d, sparse_dense


@st.composite
def problems(draw, max_rows: int = 36):
    # Small: the simulator costs ~0.4 ms per thread. N up to 40 crosses a 32-column strip,
    # M up to 36 crosses a 32-row tile of Algorithm 3 (``max_rows`` lower where the row tiles are smaller).
    m, k = draw(shapes_2d(max_size=36))
    m = min(m, max_rows)
    n = draw(dims(max_size=40))
    a = draw(sparse_dense((m, k), dtype=np.float32))
    b = draw(dense_arrays((k, n), dtype=np.float32))
    return a, b


def _check(got, a, b):
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == (a.shape[0], b.shape[1])
    assert_spmm_close(got, spmm_csr(CSR.from_dense(a), b), a, b)


@given(problems(), st.sampled_from([32, 64]))
def test_thread_per_row(prob, threads):
    a, b = prob
    _check(les.thread_per_row(CSR.from_dense(a), b, threads=threads), a, b)


@given(problems(), st.sampled_from([1, 3]))
def test_warp_per_row(prob, nwarps):
    a, b = prob
    _check(les.warp_per_row(CSR.from_dense(a), b, nwarps=nwarps), a, b)


# 16 rows still cross the block's row tile (at most 2 x 3 rows) several times; K up to 36 crosses tile_k
@given(problems(max_rows=16), st.sampled_from([1, 2]), st.sampled_from([1, 3]), st.sampled_from([8, 32]),
       st.booleans())
def test_smem_tiled(prob, nwarps, rows_per_warp, tile_k, swizzle):
    a, b = prob
    got = les.smem_tiled(CSR.from_dense(a), b, nwarps=nwarps, rows_per_warp=rows_per_warp, tile_k=tile_k,
                         swizzle=swizzle)
    _check(got, a, b)


@given(problems(), st.sampled_from([1, 3]))
def test_warp_per_row_swizzled(prob, nwarps):
    a, b = prob
    _check(les.warp_per_row_swizzled(CSR.from_dense(a), b, nwarps=nwarps), a, b)


@given(problems(), st.sampled_from([1, 2]), st.sampled_from([1, 2]))
def test_thread_group(prob, groups, k_split):
    a, b = prob
    _check(les.thread_group(CSR.from_dense(a), b, groups=groups, k_split=k_split), a, b)


@given(problems(), st.sampled_from([1, 3]), st.sampled_from([1, 5, 64]))
def test_balanced_blocks(prob, nwarps, rows_per_block):
    a, b = prob
    _check(les.balanced_blocks(CSR.from_dense(a), b, nwarps=nwarps, rows_per_block=rows_per_block), a, b)


@st.composite
def long_rows(draw):
    # Few rows (a block of 32-64 threads each), up to 80 columns: a row can span several staged
    # chunks of 32 * warps_per_row; N up to 40 crosses a 32-column strip.
    m, k = draw(st.integers(1, 4)), draw(st.integers(1, 80))
    a = draw(sparse_dense((m, k), dtype=np.float32))
    return a, draw(dense_arrays((k, draw(dims(max_size=40))), dtype=np.float32))


@given(long_rows(), st.sampled_from([1, 2]))
def test_row_split(prob, warps_per_row):
    a, b = prob
    _check(les.row_split(CSR.from_dense(a), b, warps_per_row=warps_per_row), a, b)


@given(problems())
def test_tile_csc_lists_every_nonzero_once(prob):
    a, _ = prob
    ptr, rows, vals = les.tile_csc(CSR.from_dense(a), 8)
    rebuilt = np.zeros_like(a)
    for t in range(ptr.shape[0]):
        for col in range(a.shape[1]):
            seg = slice(ptr[t, col], ptr[t, col + 1])
            assert (np.diff(rows[seg]) > 0).all()
            rebuilt[t * 8 + rows[seg], col] = vals[seg]
    assert np.array_equal(rebuilt, a)


def test_prepared_matrix_is_reused_and_lessons_agree():
    rng = np.random.default_rng(0)
    a = np.where(rng.random((20, 24)) < 0.3, rng.standard_normal((20, 24)), 0).astype(np.float32)
    b = rng.standard_normal((24, 8)).astype(np.float32)
    d = les.prepare(CSR.from_dense(a))
    assert les.prepare(d) is d
    outs = [fn(d, b) for _, fn, _ in les.LESSONS]
    for got in outs:
        _check(got, a, b)
    assert [name for name, _, _ in les.LESSONS] == ["thread_per_row", "warp_per_row", "smem_tiled",
                                                     "warp_per_row_swizzled", "thread_group", "balanced_blocks",
                                                     "row_split"]


def test_errors_name_the_argument():
    a = CSR.from_dense(np.eye(4, dtype=np.float32))
    with pytest.raises(TypeError, match="csr: the lesson kernels compute in float32"):
        les.warp_per_row(CSR.from_dense(np.eye(4)), np.ones((4, 2)))
    with pytest.raises(TypeError, match="csr: expected a sparsekit.formats.CSR"):
        les.warp_per_row(np.eye(4, dtype=np.float32), np.ones((4, 2), np.float32))
    with pytest.raises(TypeError, match="b"):
        les.warp_per_row(a, np.ones((4, 2), np.float64))
    with pytest.raises(ValueError, match="b"):
        les.warp_per_row(a, np.ones((5, 2), np.float32))
    with pytest.raises(ValueError, match="nwarps: must be <= 32"):
        les.warp_per_row(a, np.ones((4, 2), np.float32), nwarps=33)
    with pytest.raises(TypeError, match="swizzle: expected True or False"):
        les.smem_tiled(a, np.ones((4, 2), np.float32), swizzle=1)
    with pytest.raises(ValueError, match="warps_per_row: must be <= 32"):
        les.row_split(a, np.ones((4, 2), np.float32), warps_per_row=33)
    with pytest.raises(ValueError, match="k_split: must be >= 1"):
        les.thread_group(a, np.ones((4, 2), np.float32), k_split=0)
