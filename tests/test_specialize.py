"""sparsekit.specialize: the generated kernel equals sparsekit/reference/spmm.py for its one matrix."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsekit.reference.spmm import spmm_csr
from sparsekit import specialize as spz
from sparsekit.formats import CSR
from tests.spmm_close import assert_spmm_close
from tests.strategies import dense_arrays, dims, dtypes, shapes_2d, sparse_dense


@st.composite
def problems(draw):
    dt = draw(dtypes(allowed=(np.float32, np.float64)))
    m, k = draw(shapes_2d(max_size=10))
    a = draw(sparse_dense((m, k), dtype=dt))
    b = draw(dense_arrays((k, draw(dims(max_size=12))), dtype=dt))
    return a, b


@settings(max_examples=6)   # each example compiles a new kernel (~0.5-2 s): few, small examples
@given(problems())
def test_specialized_equals_reference(prob):
    a, b = prob
    csr = CSR.from_dense(a)
    spec = spz.specialize(csr)
    assert spec.nnz == csr.nnz and spec.compile_s > 0 and spec.dtype == a.dtype
    assert_spmm_close(spec(b), spmm_csr(csr, b), a, b)


@given(st.integers(1, 40), st.integers(1, 40))
def test_source_bakes_in_every_nonzero_and_reads_no_index_array(m, k):
    rng = np.random.default_rng(m * 100 + k)
    a = np.where(rng.random((m, k)) < 0.3, rng.standard_normal((m, k)), 0.0)
    src = spz.generate_source(CSR.from_dense(a))
    for name in ("indptr", "indices", "data"):
        assert name not in src
    assert src.count(" * b[") == np.count_nonzero(a)
    assert src.count("for j in range(n)") == np.count_nonzero(a.any(axis=1))


def test_empty_matrix_gives_zeros():
    spec = spz.specialize(CSR.from_dense(np.zeros((3, 4), np.float32)))
    assert np.array_equal(spec(np.ones((4, 2), np.float32)), np.zeros((3, 2), np.float32))


def test_compare_reports_times_and_agreement():
    rng = np.random.default_rng(1)
    a = np.where(rng.random((16, 16)) < 0.2, rng.standard_normal((16, 16)), 0).astype(np.float32)
    b = rng.standard_normal((16, 32)).astype(np.float32)
    rec = spz.compare(CSR.from_dense(a), b, repeat=3)
    assert rec["nnz"] == np.count_nonzero(a) and rec["compile_s"] > 0
    assert rec["specialized_s"] > 0 and rec["generic_s"] > 0
    assert rec["max_abs_diff"] <= 1e-5


def test_errors():
    with pytest.raises(TypeError, match="csr: values must be float32 or float64"):
        spz.generate_source(CSR.from_dense(np.eye(2, dtype=np.float16)))
    spec = spz.specialize(CSR.from_dense(np.eye(3)))
    with pytest.raises(ValueError, match=r"b: expected shape \(3, \*\)"):
        spec(np.ones((2, 2)))
    with pytest.raises(ValueError, match="b: the specialised kernel is compiled for a C-contiguous b"):
        spec(np.ones((2, 3)).T)
