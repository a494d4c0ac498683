"""sparsekit/cpu/spmm.py equals sparsekit/reference/spmm.py in every loop order, tile size and thread mode."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

from sparsekit.cpu import spmm as cpu
from sparsekit.reference import spmm as ref
from sparsekit.formats import COO, CSR
from tests.spmm_close import assert_spmm_close
from tests.strategies import dense_arrays, dims, dtypes, shapes_2d, sparse_dense

CPU_FLOATS = (np.float32, np.float64)


@st.composite
def problems(draw, *, max_size: int = 24):
    """(A dense with zeros, B dense) with a CPU dtype; shapes drawn first."""
    dt = draw(dtypes(allowed=CPU_FLOATS))
    m, k = draw(shapes_2d(max_size=max_size))
    n = draw(dims(max_size=max_size))
    a = draw(sparse_dense((m, k), dtype=dt))
    b = draw(dense_arrays((k, n), dtype=dt))
    return a, b


@given(problems(), st.sampled_from(cpu.ORDERS), st.booleans())
def test_csr_orders_equal_reference(prob, order, parallel):
    a, b = prob
    csr = CSR.from_dense(a)
    got = cpu.spmm_csr(csr, b, order, parallel=parallel)
    assert got.flags.c_contiguous
    assert_spmm_close(got, ref.spmm_csr(csr, b), a, b)


@given(problems(), st.sampled_from(cpu.TILES + (1, 3, 5)), st.sampled_from(cpu.TILES + (1, 7)),
       st.sampled_from((1, 4, 64)), st.booleans())
def test_tiled_equals_reference(prob, tile_n, tile_k, tile_m, parallel):
    # Tiles of 1, 3, 5, 7 do not divide the drawn sizes: the edge tiles are exercised.
    a, b = prob
    csr = CSR.from_dense(a)
    got = cpu.spmm_csr_tiled(csr, b, tile_n=tile_n, tile_k=tile_k, tile_m=tile_m, parallel=parallel)
    assert_spmm_close(got, ref.spmm_csr(csr, b), a, b)


@given(problems(), st.booleans())
def test_coo_equals_reference(prob, parallel):
    a, b = prob
    coo = COO.from_dense(a)
    assert_spmm_close(cpu.spmm_coo(coo, b, parallel=parallel), ref.spmm_coo(coo, b), a, b)


@given(problems(max_size=12), st.sampled_from(cpu.DENSE_ORDERS), st.booleans())
def test_dense_orders_equal_reference(prob, order, parallel):
    a, b = prob
    assert_spmm_close(cpu.spmm_dense(a, b, order=order, parallel=parallel), ref.spmm_dense(a, b), a, b)


@given(problems())
def test_parallel_is_bitwise_serial(prob):
    # No two threads write one element of C, and each element sums in the same order.
    a, b = prob
    csr = CSR.from_dense(a)
    for order in cpu.ORDERS:
        assert np.array_equal(cpu.spmm_csr(csr, b, order, parallel=True), cpu.spmm_csr(csr, b, order))
    assert np.array_equal(cpu.spmm_csr_tiled(csr, b, parallel=True), cpu.spmm_csr_tiled(csr, b))


@given(problems())
def test_rowwise_and_tiled_sum_in_the_same_order(prob):
    # Tiling reorders loops around the sum, never the sum itself: bit-identical to Gustavson.
    a, b = prob
    csr = CSR.from_dense(a)
    assert np.array_equal(cpu.spmm_csr_tiled(csr, b, tile_n=16, tile_k=16), cpu.spmm_csr(csr, b))


@given(problems())
def test_csr_to_csc_equals_scipy(prob):
    a, _ = prob
    csr = CSR.from_dense(a)
    colptr, rows, vals = cpu.csr_to_csc(csr)
    want = sp.csc_array(a)
    assert np.array_equal(colptr, want.indptr)
    assert np.array_equal(rows, want.indices)
    assert np.array_equal(vals, want.data)


def test_accepts_scipy_csr():
    a = np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 3.0]])
    b = np.arange(6.0).reshape(3, 2)
    assert np.array_equal(cpu.spmm_csr(sp.csr_array(a), b), a @ b)


def test_empty_matrix_gives_zeros():
    csr = CSR.from_dense(np.zeros((5, 4), np.float32))
    b = np.ones((4, 3), np.float32)
    for order in cpu.ORDERS:
        assert np.array_equal(cpu.spmm_csr(csr, b, order), np.zeros((5, 3), np.float32))


def test_errors_name_the_argument():
    a = np.eye(3, dtype=np.float32)
    csr = CSR.from_dense(a)
    with pytest.raises(TypeError, match="float16"):
        cpu.spmm_csr(CSR.from_dense(a.astype(np.float16)), np.ones((3, 2), np.float16))
    with pytest.raises(TypeError, match="b: dtype"):
        cpu.spmm_csr(csr, np.ones((3, 2), np.float64))
    with pytest.raises(ValueError, match=r"b: expected shape \(3, \*\)"):
        cpu.spmm_csr(csr, np.ones((4, 2), np.float32))
    with pytest.raises(ValueError, match="order: expected one of"):
        cpu.spmm_csr(csr, np.ones((3, 2), np.float32), "kji")
    with pytest.raises(ValueError, match="order: expected one of"):
        cpu.spmm_dense(a, np.ones((3, 2), np.float32), order="rowwise")
    with pytest.raises(ValueError, match="tile_k: must be >= 1"):
        cpu.spmm_csr_tiled(csr, np.ones((3, 2), np.float32), tile_k=0)
    with pytest.raises(TypeError, match="parallel: expected True or False"):
        cpu.spmm_csr(csr, np.ones((3, 2), np.float32), parallel=1)
    with pytest.raises(TypeError, match="csr: expected a CSR matrix"):
        cpu.spmm_csr(a, np.ones((3, 2), np.float32))
    shuffled = sp.csr_array((np.ones(2, np.float32), np.array([2, 0]), np.array([0, 2, 2, 2])), shape=(3, 3))
    with pytest.raises(ValueError, match="csr.indices: the tiled kernel needs sorted"):
        cpu.spmm_csr_tiled(shuffled, np.ones((3, 2), np.float32))
    unsorted = COO(np.array([1, 0]), np.array([0, 0]), np.ones(2, np.float32), (2, 2))
    with pytest.raises(ValueError, match="coo.row"):
        cpu.spmm_coo(unsorted, np.ones((2, 2), np.float32), parallel=True)
