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


def _mtx(tmp_path, header: str, body: str, field: str = "real"):
    path = tmp_path / "m.mtx"
    path.write_text(f"%%MatrixMarket matrix coordinate {field} general\n{header}\n{body}")
    return path


@pytest.mark.parametrize("value, dtype, message", [
    ("nan", np.float32, "values must be finite, found nan at row 1, column 2"),
    ("-inf", np.float64, "values must be finite, found -inf at row 1, column 2"),
    ("70000", np.float16, r"value 70000.0 at row 1, column 2 overflows float16 \(largest 65504"),
    ("1e39", np.float32, "overflows float32"),
])
def test_read_mtx_refuses_values_that_are_not_finite_in_the_dtype(tmp_path, value, dtype, message):
    path = _mtx(tmp_path, "2 3 2", f"1 1 1.0\n2 3 {value}\n")
    with pytest.raises(ValueError, match=message):
        io.read_mtx(path, dtype=dtype)


def test_read_mtx_keeps_the_largest_float16():
    """65504 is float16's largest finite value: read exactly, not refused."""
    with tempfile.TemporaryDirectory() as d:
        path = _mtx(Path(d), "1 2 1", "1 2 65504\n")
        assert io.read_mtx(path, dtype=np.float16).data.tolist() == [65504.0]


def test_read_mtx_chooses_the_index_dtype_from_the_header(tmp_path):
    small = io.read_mtx(_mtx(tmp_path, "2 3 1", "2 3 4.0\n"))
    assert small.indices.dtype == np.int32 and small.indptr.dtype == np.int32
    wide = io.read_mtx(_mtx(tmp_path, "1 3000000000 1", "1 2999999999 4.0\n"))
    assert wide.indices.dtype == np.int64 and wide.indices.tolist() == [2999999998]   # 1-based in the file
    assert wide.shape == (1, 3000000000) and wide.data.tolist() == [4.0]


@pytest.mark.parametrize("header, body, message", [
    ("1000000000000 3 1", "1 1 1.0\n", "header declares 1000000000000 rows; at most 2147483647"),
    ("2 2 5", "1 1 1.0\n", r"header declares 5 entries in a 2 x 2 matrix \(at most 4\)"),
    ("100000 100000 1000000", "1 1 1.0\n", "header declares 1000000 entries, at least 4000000 bytes"),
    ("2 3 2", "1 1 1.0\n", "not a readable Matrix Market file"),                 # truncated
    ("2 3 1", "1 9 1.0\n", "not a readable Matrix Market file"),                 # column past the header's
    ("2 3 99999999999999999999", "1 1 1.0\n", "not a readable Matrix Market header"),
])
def test_read_mtx_refuses_absurd_or_corrupt_headers(tmp_path, header, body, message):
    with pytest.raises(ValueError, match=message):
        io.read_mtx(_mtx(tmp_path, header, body))


def test_read_mtx_refuses_a_file_without_a_banner(tmp_path):
    for text in ("", "garbage\n"):
        path = tmp_path / "g.mtx"
        path.write_text(text)
        with pytest.raises(ValueError, match=f"{path}: not a readable Matrix Market header"):
            io.read_mtx(path)


def test_read_smtx_refuses_a_twenty_digit_count(tmp_path):
    path = tmp_path / "big.smtx"
    path.write_text("2, 4, 3\n0 2 3\n1 3 12345678901234567890\n")
    with pytest.raises(ValueError, match=r"line 3 \(column indices\) must be integers below 2\*\*63"):
        io.read_smtx(path)
    path.write_text("12345678901234567890, 4, 0\n0\n\n")
    with pytest.raises(ValueError, match="line 1 declares 12345678901234567890 rows"):
        io.read_smtx(path)


@pytest.mark.parametrize("write", [io.write_smtx, io.write_mtx], ids=["smtx", "mtx"])
def test_writers_take_a_valid_csr_only(tmp_path, write):
    dense = np.eye(3, dtype=np.float32)
    with pytest.raises(TypeError, match="csr: expected a sparsekit.formats.CSR .*got ndarray"):
        write(tmp_path / "a", dense)
    bad = CSR(np.array([0, 1, 1, 1], dtype=np.int32), np.array([3], dtype=np.int32), np.ones(1, np.float32), (3, 3))
    with pytest.raises(ValueError, match=r"indices: indices must lie in \[0, 3\), found 3"):
        write(tmp_path / "a", bad)
    assert not (tmp_path / "a").exists()


def test_read_mtx_symmetric_array_is_not_mistaken_for_a_short_file(tmp_path):
    """A symmetric array stores one triangle: fewer values than its header's rows x cols."""
    n = 40
    tri = [str((i + j) % 10) for j in range(n) for i in range(j, n)]
    path = tmp_path / "s.mtx"
    path.write_text(f"%%MatrixMarket matrix array integer symmetric\n{n} {n}\n" + "\n".join(tri) + "\n")
    assert path.stat().st_size < 2 * n * n
    got = io.read_mtx(path, dtype=np.float64).to_dense()
    i, j = np.indices((n, n))
    want = ((np.maximum(i, j) + np.minimum(i, j)) % 10).astype(np.float64)
    np.testing.assert_array_equal(got, want)


def test_doctests():
    import doctest

    result = doctest.testmod(io)
    assert result.attempted > 0 and result.failed == 0
