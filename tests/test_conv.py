"""Sparse R x S convolution: reference im2col + SpMM and sparsekit/cpu/conv.py equal the direct convolution."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparsekit.cpu import conv as cconv
from sparsekit.reference import conv as rconv
from sparsekit.formats import CSR
from tests.spmm_close import assert_spmm_close
from tests.strategies import dense_arrays, dtypes, sparse_dense


@st.composite
def problems(draw, *, float_dtypes=(np.float32, np.float64)):
    """(x (C, H, W), w (K, C, R, S) with zeros, padding); image at least as large as the filter needs."""
    dt = draw(dtypes(allowed=float_dtypes))
    c, kk = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    r, s = draw(st.sampled_from([(3, 3), (1, 1), (3, 1), (2, 3)]))
    padding = draw(st.integers(0, 2))
    h = draw(st.integers(max(1, r - 2 * padding), 7))
    w_ = draw(st.integers(max(1, s - 2 * padding), 7))
    x = draw(dense_arrays((c, h, w_), dtype=dt))
    w = draw(sparse_dense((kk, c * r * s), dtype=dt)).reshape(kk, c, r, s)
    return x, w, padding


def _close(got, x, w, padding):
    kk, c, r, s = w.shape
    want = rconv.conv2d_direct(x, w, padding=padding)
    b = rconv.im2col(x, r, s, padding=padding)
    assert_spmm_close(got.reshape(kk, -1), want.reshape(kk, -1), w.reshape(kk, -1), b)


@given(problems(float_dtypes=(np.float16, np.float32, np.float64)))
def test_reference_im2col_spmm_equals_direct(prob):
    x, w, padding = prob
    kk, c, r, s = w.shape
    got = rconv.conv2d_im2col(CSR.from_dense(w.reshape(kk, -1)), x, r, s, padding=padding)
    _close(got, x, w, padding)


@given(problems())
def test_cpu_im2col_is_the_reference_im2col(prob):
    x, w, padding = prob
    _, _, r, s = w.shape
    assert np.array_equal(cconv.im2col(x, r, s, padding=padding), rconv.im2col(x, r, s, padding=padding))


@given(problems(), st.booleans())
def test_cpu_sparse_convolutions_equal_direct(prob, parallel):
    x, w, padding = prob
    kk, c, r, s = w.shape
    csr = CSR.from_dense(w.reshape(kk, -1))
    _close(cconv.conv2d_im2col(csr, x, r, s, padding=padding, parallel=parallel), x, w, padding)
    _close(cconv.conv2d_virtual(csr, x, r, s, padding=padding), x, w, padding)
    _close(cconv.conv2d_dense(w, x, padding=padding), x, w, padding)


def test_im2col_layout_by_hand():
    # 1 channel, 2x2 image, 3x3 filter, padding 1: row r*3 + s is the image shifted by (r-1, s-1).
    x = np.array([[[1.0, 2.0], [3.0, 4.0]]])
    cols = rconv.im2col(x)
    assert cols.shape == (9, 4)
    assert cols[4].tolist() == [1, 2, 3, 4]        # centre tap: the image itself
    assert cols[0].tolist() == [0, 0, 0, 1]        # top-left tap: only output (1, 1) sees x[0, 0]


def test_errors():
    x = np.ones((2, 4, 4), np.float32)
    csr = CSR.from_dense(np.ones((3, 18), np.float32))
    with pytest.raises(ValueError, match=r"w_csr: expected 18 columns"):
        cconv.conv2d_im2col(CSR.from_dense(np.ones((3, 9), np.float32)), x)
    with pytest.raises(TypeError, match="w_csr: values dtype must equal"):
        cconv.conv2d_virtual(CSR.from_dense(np.ones((3, 18))), x)
    with pytest.raises(ValueError, match="needs an image of at least"):
        cconv.conv2d_virtual(csr, np.ones((2, 1, 4), np.float32), padding=0)
    with pytest.raises(TypeError, match="x: the CPU kernels compute in float32 or float64"):
        cconv.im2col(np.ones((2, 4, 4), np.float16))
    assert cconv.conv2d_virtual(csr, x).shape == (3, 4, 4)
