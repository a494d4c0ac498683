"""sparsekit.io: .smtx and Matrix Market round trips and their error messages."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparsekit import io
from sparsekit.formats import CSR
from tests.strategies import dtypes, shapes_2d, sparse_dense


@st.composite
def csrs(draw, *, dtype=np.float32):
    return CSR.from_dense(draw(sparse_dense(draw(shapes_2d(max_size=30)), dtype=dtype)))


@given(csrs(), st.integers(0, 2**31), dtypes())
def test_smtx_round_trip_keeps_the_pattern(a, seed, dtype):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "a.smtx"
        io.write_smtx(path, a)
        b = io.read_smtx(path, seed=seed, dtype=dtype)
        c = io.read_matrix(path, seed=seed, dtype=dtype)
    b.validate(full=True)
    assert b.shape == a.shape and b.data.dtype == dtype
    assert np.array_equal(b.indptr, a.indptr) and np.array_equal(b.indices, a.indices)
    assert np.array_equal(b.data, io.seeded_values(a.nnz, seed=seed, dtype=dtype))
    assert np.array_equal(c.data, b.data)          # same file, same seed: same matrix


@given(csrs(dtype=np.float64))
def test_mtx_round_trip_keeps_values(a):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "a.mtx"
        io.write_mtx(path, a)
        b = io.read_matrix(path, dtype=np.float64)
    # mmwrite prints 17 significant digits, so float64 values survive exactly.
    assert np.array_equal(b.to_dense(), a.to_dense())


def test_pattern_mtx_gets_seeded_values(tmp_path):
    path = tmp_path / "p.mtx"
    path.write_text("%%MatrixMarket matrix coordinate pattern general\n3 4 3\n1 2\n3 1\n3 4\n")
    a = io.read_mtx(path, seed=7)
    assert a.indptr.tolist() == [0, 1, 1, 3] and a.indices.tolist() == [1, 0, 3]
    assert np.array_equal(a.data, io.seeded_values(3, seed=7))


def test_unsorted_smtx_rows_are_sorted(tmp_path):
    path = tmp_path / "u.smtx"
    path.write_text("2, 4, 3\n0 2 3\n3 1 0\n")
    a = io.read_smtx(path)
    assert a.indices.tolist() == [1, 3, 0]


@pytest.mark.parametrize("text, message", [
    ("2 4 3\n0 2 3\n3 1 0\n", "line 1 must be 'rows, cols, nnz'"),
    ("2, 4, 3\n0 2\n3 1 0\n", "rows \\+ 1 = 3 row offsets, got 2"),
    ("2, 4, 3\n0 2 3\n3 1\n", "nnz = 3 column indices, got 2"),
    ("2, 4, 3\n0 3 2\n3 1 0\n", "row offsets must start at 0, never decrease"),
    ("2, 4, 3\n0 2 3\n3 4 0\n", r"column indices must lie in \[0, 4\), found 4"),
    ("2, 4, 3\n0 2 3\n1 1 0\n", "row 0 repeats a column index"),
    ("2, 4, 3\n0 2 3\n1 x 0\n", "must be integers"),
    ("2, 4, 3\n0 2 3\n1 2 0\n5\n", "expected 3 lines"),
])
def test_bad_smtx_files_are_named(tmp_path, text, message):
    path = tmp_path / "bad.smtx"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        io.read_smtx(path)


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="expected a .smtx or .mtx file"):
        io.read_matrix(tmp_path / "a.txt")
    with pytest.raises(TypeError, match="dtype: must be float16"):
        io.seeded_values(3, dtype=np.int32)
