"""Bad input matrix: every public entry point against every class of bad input.

Two tables. The weight table: (entry point, a callable taking a weight-like
first argument); each weight class is a transformation of a good weight that
must raise ``TypeError`` or ``ValueError`` whose message names the argument.
The case table, :data:`CASES`: one row per (entry point, bad-input class) for
the rest -- format instances with a negative, out-of-range or duplicate stored
index, NaN/Inf values, wrong dtypes, ranks and layouts, index dtypes too narrow
for the shape, empty matrices, corrupt and absurd files, corrupt tune caches --
each expecting a named ``ValueError``/``TypeError`` or checking the correct
result. The coverage test fails when a public function or method of
``sparsekit.formats``, ``sparsekit.io`` or ``sparsekit.prune`` is in neither
table. The modules' own tests check the exact rules; this one checks that no
entry point forgets a class. Sparsity outside [0, 1) is covered for every
pruner by ``tests/test_prune.py::test_bad_sparsity`` and not repeated here.
"""
from __future__ import annotations

import dataclasses
import json
import warnings
from types import SimpleNamespace
from typing import Callable, NamedTuple

import numpy as np
import pytest
import scipy.sparse as sp

from sparsekit import formats, io, prune, tune

GOOD = np.arange(1, 65, dtype=np.float32).reshape(8, 8) * np.where(np.arange(64) % 3, 1, -1).reshape(8, 8)


def _nan(w):
    w = w.copy()
    w[1, 1] = np.nan
    return w


def _inf(w):
    w = w.copy()
    w[3, 1] = -np.inf
    return w


def _two_of_four(w):
    """Zero the last two of every four columns (keeping NaN/Inf/dtype), so the weight is 2:4."""
    if not isinstance(w, np.ndarray):
        return w
    return np.where(np.arange(w.shape[-1]) % 4 < 2, w, np.zeros((), dtype=w.dtype))


# class name -> (transform of the good weight, expected exception, text the message must contain)
WEIGHT_CLASSES = {
    "not_2d": (lambda w: w.reshape(-1), ValueError, "2-D"),
    "3d": (lambda w: w.reshape(2, 4, 8), ValueError, "2-D"),
    "int_dtype": (lambda w: w.astype(np.int32), TypeError, "dtype"),
    "complex_dtype": (lambda w: w.astype(np.complex64), TypeError, "dtype"),
    "nan": (_nan, ValueError, "finite"),
    "inf": (_inf, ValueError, "finite"),
    "not_array": (lambda w: w.tolist(), TypeError, "ndarray"),
}

# entry point -> (call with the weight, the name its messages use for the weight)
PRUNERS = {
    "magnitude": (lambda w: prune.magnitude(w, 0.5), "w"),
    "uniform": (lambda w: prune.uniform(w, 0.5), "w"),
    "row_balanced": (lambda w: prune.row_balanced(w, 0.5), "w"),
    "blocked_uniform": (lambda w: prune.blocked_uniform(w, 0.5, 2), "w"),
    "n_m": (lambda w: prune.n_m(w, 2, 4), "w"),
    "block": (lambda w: prune.block(w, 0.5, (2, 2)), "w"),
    "magnitude_global": (lambda w: prune.magnitude_global({"fc": w}, 0.5), "fc"),
    "uniform_global": (lambda w: prune.uniform_global({"fc": w}, 0.5), "fc"),
}
FROM_DENSE = {
    "CSR": (lambda w: formats.CSR.from_dense(w), "dense"),
    "COO": (lambda w: formats.COO.from_dense(w), "dense"),
    "ELL": (lambda w: formats.ELL.from_dense(w), "dense"),
    "BlockedELL": (lambda w: formats.BlockedELL.from_dense(w, block=2), "dense"),
    "NM": (lambda w: formats.NM.from_dense(_two_of_four(w), n=2, m=4), "dense"),
    "BSR": (lambda w: formats.BSR.from_dense(w, blocksize=(2, 2)), "dense"),
}
ENTRY_POINTS = {**{f"prune.{k}": v for k, v in PRUNERS.items()},
                **{f"formats.{k}.from_dense": v for k, v in FROM_DENSE.items()}}
# 4-D conv weights are accepted by pruners but not by formats (a format is a matrix).
CONV_OK = {f"prune.{k}" for k in PRUNERS}


def test_weight_table_covers_every_weight_taking_function():
    weight_taking = set(prune.__all__) - {"gradual_schedule", "halving_schedule"}
    assert weight_taking == set(PRUNERS)
    assert {name for name in formats.__all__ if hasattr(getattr(formats, name), "from_dense")} == set(FROM_DENSE)


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("bad", sorted(WEIGHT_CLASSES))
def test_bad_weight_is_refused_with_a_named_argument(entry, bad):
    call, argname = ENTRY_POINTS[entry]
    transform, exc, text = WEIGHT_CLASSES[bad]
    with pytest.raises(exc) as info:
        call(transform(GOOD))
    message = str(info.value)
    assert argname in message and text in message, message


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_good_weight_is_accepted_and_not_modified(entry):
    call, _ = ENTRY_POINTS[entry]
    w = GOOD.copy()
    w.setflags(write=False)
    call(w)
    assert np.array_equal(w, GOOD)


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_conv_weights_only_where_documented(entry):
    call, _ = ENTRY_POINTS[entry]
    conv = GOOD.reshape(8, 2, 2, 2)
    if entry in CONV_OK:
        call(conv)
    else:
        with pytest.raises(ValueError, match="2-D"):
            call(conv)


@pytest.mark.parametrize("call, match", [
    (lambda: prune.n_m(GOOD, 5, 4), "n"),                       # n > m
    (lambda: prune.n_m(GOOD[:, :6], 2, 4), "divisible"),         # K not a multiple of m
    (lambda: prune.blocked_uniform(GOOD[:6, :6], 0.5, 4), "divisible"),
    (lambda: prune.block(GOOD, 0.5, (3, 2)), "divisible"),
    (lambda: formats.BlockedELL.from_dense(GOOD[:6], block=4), "divisible"),
    (lambda: formats.BSR.from_dense(GOOD, blocksize=(3, 3)), "divisible"),
    (lambda: formats.NM.from_dense(GOOD[:, :6], n=2, m=4), "divisible"),
])
def test_shapes_not_divisible_by_block_or_group_are_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_csr_index_errors_are_refused():
    good = formats.CSR.from_dense(GOOD)
    out_of_range = good.indices.copy()
    out_of_range[0] = 8
    unsorted = good.indices.copy()
    unsorted[[0, 1]] = unsorted[[1, 0]]
    duplicate = good.indices.copy()
    duplicate[1] = duplicate[0]
    for indices, text in [(out_of_range, "indices"), (unsorted, "indices"), (duplicate, "indices")]:
        bad = formats.CSR(good.indptr, indices, good.data, good.shape)
        with pytest.raises(ValueError, match=text):
            bad.validate(full=True)


def test_uniform_ell_refuses_rows_of_different_length():
    ragged = GOOD.copy()
    ragged[0, :3] = 0
    with pytest.raises(ValueError, match="row"):
        formats.ELL.from_dense(ragged)


def test_persistent_rnn_spin_limit_is_capped_so_a_timeout_comes_in_seconds():
    from gpu import persistent_rnn
    from sparsekit.rnn_layout import balance

    layout = balance((np.eye(8, dtype=np.float32) + 0.25) / 8, tpr=4)
    assert persistent_rnn.PersistentRNN(layout, 4, rows_per_block=8, spin_limit=1 << 22).spin_limit == 1 << 22
    for bad in (2**31 - 1, (1 << 22) + 1):
        with pytest.raises(ValueError, match=f"spin_limit: must be <= 4194304, got {bad}"):
            persistent_rnn.PersistentRNN(layout, 4, rows_per_block=8, spin_limit=bad)


# --------------------------------------------------------------------------- the case table

class Case(NamedTuple):
    """One cell of the matrix: ``call(tmp_path)`` must raise ``raises`` with every one of ``texts`` in its message,
    or (``raises`` None) return a value ``check`` accepts."""

    entry: str
    bad: str
    call: Callable
    raises: type | None = None
    texts: tuple = ()
    check: Callable | None = None


def _refuses(entry, bad, call, raises, *texts) -> Case:
    return Case(entry, bad, call, raises, texts)


def _gives(entry, bad, call, check) -> Case:
    return Case(entry, bad, call, check=check)


#: A pattern every format stores: columns 0, 1, 4, 5 of every row (uniform, 2:4, whole 2 x 2 blocks).
KEEP = np.broadcast_to(np.arange(8) % 4 < 2, (8, 8))
DENSE = np.where(KEEP, GOOD, np.float32(0))
MAKE = {
    "CSR": lambda w, keep: formats.CSR.from_dense(w, keep),
    "COO": lambda w, keep: formats.COO.from_dense(w, keep),
    "ELL": lambda w, keep: formats.ELL.from_dense(w, keep),
    "BlockedELL": lambda w, keep: formats.BlockedELL.from_dense(w, keep, block=2),
    "NM": lambda w, keep: formats.NM.from_dense(w, keep, n=2, m=4),
    "BSR": lambda w, keep: formats.BSR.from_dense(w, keep, blocksize=(2, 2)),
}
#: Per format: the index field, then (bad class, position, new value or a function of the index array giving it,
#: text the message must hold) for each corruption. Duplicates copy the row's first index over its second.
INDEX_FIELD = {"CSR": "indices", "COO": "col", "ELL": "indices", "BlockedELL": "indices", "NM": "positions",
               "BSR": "indices"}
_FLAT_DUPLICATE = ("duplicate_index", 1, lambda idx: idx[0], "no duplicates")
_ROW_DUPLICATE = ("duplicate_index", (0, 1), lambda idx: idx[0, 0], "no duplicates")
INDEX_BADS = {
    "CSR": [("negative_index", 0, -1, "found -1"), ("index_out_of_range", -1, 8, "found 8"), _FLAT_DUPLICATE],
    "COO": [("negative_index", 0, -1, "found -1"), ("index_out_of_range", -1, 8, "found 8"), _FLAT_DUPLICATE],
    "ELL": [("negative_index", (0, 0), -1, "found -1"), ("index_out_of_range", (7, 3), 8, "found 8"),
            _ROW_DUPLICATE],
    "BlockedELL": [("negative_index", (0, 0), -1, "found -1"), ("index_out_of_range", (3, 1), 4, "found 4"),
                   _ROW_DUPLICATE],
    "NM": [("index_out_of_range", (0, 1), 4, "found 4"), _ROW_DUPLICATE],   # uint8 positions: never negative
    "BSR": [("negative_index", 0, -1, "found -1"), ("index_out_of_range", -1, 4, "found 4"), _FLAT_DUPLICATE],
}
#: Every public method that reads a built instance (``from_csr`` reads a CSR, so it is fed the corrupt CSR).
READERS = {
    "to_dense": lambda x: x.to_dense(),
    "mask": lambda x: x.mask(),
    "to_csr": lambda x: x.to_csr(),
    "validate": lambda x: x.validate(full=True),
}


def _good(name: str):
    return MAKE[name](DENSE, KEEP)


def _with_index(name: str, position, value):
    """The good instance of ``name`` with one stored index replaced (constructors run the cheap checks only)."""
    x = _good(name)
    field = INDEX_FIELD[name]
    idx = getattr(x, field).copy(order="K")
    idx[position] = value(idx) if callable(value) else value
    return dataclasses.replace(x, **{field: idx})


def _with_value(name: str, value):
    x = _good(name)
    field = x._values_field
    vals = getattr(x, field).copy(order="K")
    vals[(0,) * vals.ndim] = value                                  # the entry stored first: dense (0, 0)
    return dataclasses.replace(x, **{field: vals})


def _same_dense(expected):
    return lambda got: np.array_equal(got, expected, equal_nan=True)


def _format_cases() -> list[Case]:
    cases = []
    for name in MAKE:
        cls = getattr(formats, name)
        field = INDEX_FIELD[name]
        readers = dict(READERS)
        if hasattr(cls, "to_scipy"):
            readers["to_scipy"] = lambda x: x.to_scipy(dtype=np.float64)
        for bad, position, value, text in INDEX_BADS[name]:
            for method, read in readers.items():
                cases.append(_refuses(f"formats.{name}.{method}", bad,
                                      lambda tmp, n=name, p=position, v=value, r=read: r(_with_index(n, p, v)),
                                      ValueError, f"{field}: ", text))
            cases.append(_gives(f"formats.{name}.nbytes", bad,             # counts arrays, reads no index: exact
                                lambda tmp, n=name, p=position, v=value: _with_index(n, p, v).nbytes(),
                                lambda got, n=name: got == _good(n).nbytes()))
            cases.append(_refuses("formats.convert", f"{bad}:{name}",
                                  lambda tmp, n=name, p=position, v=value: formats.convert(_with_index(n, p, v),
                                                                                          formats.COO),
                                  ValueError, f"{field}: ", text))
        # NaN/Inf values: the full check refuses them; to_dense passes them to where they are stored
        for bad, value in (("nan", np.nan), ("inf", np.inf)):
            cases.append(_refuses(f"formats.{name}.validate", bad,
                                  lambda tmp, n=name, v=value: _with_value(n, v).validate(full=True),
                                  ValueError, "must be finite"))
            cases.append(_gives(f"formats.{name}.to_dense", bad,
                                lambda tmp, n=name, v=value: _with_value(n, v).to_dense(),
                                lambda got, v=value: got[0, 0] == v if v == v else np.isnan(got[0, 0])))
        # empty matrices are matrices: every reader gives the empty answer
        empty_dense = np.zeros((0, 8), dtype=np.float32)
        cases.append(_gives(f"formats.{name}.from_dense", "empty",
                            lambda tmp, n=name: MAKE[n](empty_dense, None).to_dense(), _same_dense(empty_dense)))
        cases.append(_gives(f"formats.{name}.mask", "empty", lambda tmp, n=name: MAKE[n](empty_dense, None).mask(),
                            lambda got: got.shape == (0, 8) and got.dtype == bool))
        cases.append(_gives(f"formats.{name}.to_csr", "empty", lambda tmp, n=name: MAKE[n](empty_dense, None).to_csr(),
                            lambda got: got.nnz == 0 and got.shape == (0, 8)))
        cases.append(_gives(f"formats.{name}.from_csr", "empty",
                            lambda tmp, c=cls, n=name: c.from_csr(formats.CSR.from_dense(empty_dense),
                                                                  **_convert_options(n)).to_dense(),
                            _same_dense(empty_dense)))
        bad_csr = _with_index("CSR", -1, 8)
        cases.append(_refuses(f"formats.{name}.from_csr", "index_out_of_range",
                              lambda tmp, c=cls, n=name: c.from_csr(bad_csr, **_convert_options(n)),
                              ValueError, "indices: ", "found 8"))
        cases.append(_refuses(f"formats.{name}.from_csr", "wrong_type", lambda tmp, c=cls: c.from_csr(DENSE),
                              TypeError, "csr: expected a CSR"))
        if hasattr(cls, "to_scipy"):
            cases.append(_gives(f"formats.{name}.to_scipy", "empty",
                                lambda tmp, n=name: MAKE[n](empty_dense, None).to_scipy().toarray(),
                                _same_dense(empty_dense)))
    return cases


def _convert_options(name: str) -> dict:
    return {"BlockedELL": dict(block=2), "NM": dict(n=2, m=4), "BSR": dict(blocksize=(2, 2))}.get(name, {})


def _constructor_cases() -> list[Case]:
    """Each constructor: wrong dtype, rank or layout, not an array, an index dtype too narrow for the shape."""
    csr, coo, ell, bell, nm, bsr = (_good(n) for n in MAKE)
    rows = [
        ("CSR", "wrong_dtype", lambda: dataclasses.replace(csr, indices=csr.indices.astype(np.float32)),
         TypeError, ("indices: dtype must be",)),
        ("CSR", "wrong_rank", lambda: dataclasses.replace(csr, data=csr.data.reshape(4, -1)), ValueError,
         ("data: expected a 1-D array",)),
        ("CSR", "not_array", lambda: dataclasses.replace(csr, indptr=csr.indptr.tolist()), TypeError,
         ("indptr: expected a numpy.ndarray",)),
        ("CSR", "index_dtype_overflow", lambda: dataclasses.replace(csr, indices=csr.indices.astype(np.int16),
                                                                    shape=(8, 40000)),
         ValueError, ("indices: int16 cannot index columns = 40000",)),
        ("COO", "wrong_dtype", lambda: dataclasses.replace(coo, data=coo.data.astype(np.int32)), TypeError,
         ("data: dtype must be",)),
        ("COO", "wrong_shape", lambda: dataclasses.replace(coo, row=coo.row[:-1]), ValueError,
         ("row: length should equal len(data)",)),
        ("COO", "index_dtype_overflow", lambda: dataclasses.replace(coo, row=coo.row.astype(np.int16),
                                                                    col=coo.col.astype(np.int16), shape=(40000, 8)),
         ValueError, ("row: int16 cannot index rows = 40000",)),
        ("ELL", "not_contiguous", lambda: dataclasses.replace(ell, values=np.ascontiguousarray(ell.values)),
         ValueError, ("values: should be Fortran-ordered",)),
        ("ELL", "wrong_dtype",
         lambda: dataclasses.replace(ell, indices=np.asfortranarray(ell.indices.astype(np.int64))),
         TypeError, ("indices: dtype must be one of (int16, int32)",)),
        ("ELL", "index_dtype_overflow",
         lambda: dataclasses.replace(ell, indices=np.asfortranarray(ell.indices.astype(np.int16)), shape=(8, 40000)),
         ValueError, ("indices: int16 cannot index columns = 40000",)),
        ("BlockedELL", "wrong_rank", lambda: dataclasses.replace(bell, values=bell.values[0]), ValueError,
         ("values: expected a 4-D array",)),
        ("BlockedELL", "wrong_dtype", lambda: dataclasses.replace(bell, block=2.0), TypeError,
         ("block: expected an integer",)),
        ("NM", "wrong_dtype", lambda: dataclasses.replace(nm, positions=nm.positions.astype(np.int32)), TypeError,
         ("positions: dtype must be one of (uint8)",)),
        ("NM", "wrong_shape", lambda: dataclasses.replace(nm, values=nm.values[:, :2]), ValueError,
         ("values: expected shape",)),
        ("BSR", "wrong_shape", lambda: dataclasses.replace(bsr, data=bsr.data[:, :1]), ValueError,
         ("data: expected shape",)),
        ("BSR", "wrong_dtype", lambda: dataclasses.replace(bsr, indptr=bsr.indptr.astype(np.float64)), TypeError,
         ("indptr: dtype must be",)),
    ]
    return [_refuses(f"formats.{name}", bad, lambda tmp, make=make: make(), exc, *texts)
            for name, bad, make, exc, texts in rows]


def _scipy_cases() -> list[Case]:
    cases = []
    dup = sp.coo_array((np.array([1.0, 2.5]), (np.array([0, 0]), np.array([1, 1]))), shape=(2, 3))
    for name in ("CSR", "COO", "BSR"):
        cls = getattr(formats, name)
        cases.append(_refuses(f"formats.{name}.from_scipy", "not_scipy", lambda tmp, c=cls: c.from_scipy(DENSE),
                              TypeError, "a: expected a scipy.sparse"))
        cases.append(_gives(f"formats.{name}.from_scipy", "duplicate_index",      # SciPy's meaning: the sum
                            lambda tmp, c=cls: c.from_scipy(dup).to_dense(),
                            _same_dense(np.array([[0, 3.5, 0], [0, 0, 0]]))))
        cases.append(_gives(f"formats.{name}.from_scipy", "empty",
                            lambda tmp, c=cls: c.from_scipy(sp.csr_array((0, 4))).to_dense(),
                            _same_dense(np.zeros((0, 4)))))
    cases += [
        _refuses("formats.convert", "not_a_format", lambda tmp: formats.convert(DENSE, formats.CSR), TypeError,
                 "x: expected a sparsekit format"),
        _refuses("formats.convert", "not_a_format_class", lambda tmp: formats.convert(_good("CSR"), dict), TypeError,
                 "cls: expected one of"),
    ]
    return cases


def _write(tmp, name: str, text: str):
    path = tmp / name
    path.write_text(text)
    return path


MTX = "%%MatrixMarket matrix coordinate real general\n"


def _io_cases() -> list[Case]:
    bad_csr = _with_index("CSR", -1, 8)
    duplicate_csr = _with_index("CSR", *_FLAT_DUPLICATE[1:3])
    nan_csr = _with_value("CSR", np.nan)
    empty_csr = formats.CSR.from_dense(np.zeros((3, 4), dtype=np.float32))
    cases = []
    for reader in ("read_smtx", "read_matrix"):
        read = getattr(io, reader)
        cases += [
            _refuses(f"io.{reader}", "corrupt_file", lambda tmp, r=read: r(_write(tmp, "a.smtx", "\x00\x01garbage\n")),
                     ValueError, "a.smtx: line 1 must be 'rows, cols, nnz'"),
            _refuses(f"io.{reader}", "empty_file", lambda tmp, r=read: r(_write(tmp, "a.smtx", "")), ValueError,
                     "line 1 must be"),
            _refuses(f"io.{reader}", "negative_index",
                     lambda tmp, r=read: r(_write(tmp, "a.smtx", "2, 3, 1\n0 1 1\n-1\n")),
                     ValueError, "column indices must lie in [0, 3), found -1"),
            _refuses(f"io.{reader}", "index_out_of_range",
                     lambda tmp, r=read: r(_write(tmp, "a.smtx", "2, 3, 1\n0 1 1\n3\n")), ValueError, "found 3"),
            _refuses(f"io.{reader}", "duplicate_index",
                     lambda tmp, r=read: r(_write(tmp, "a.smtx", "1, 3, 2\n0 2\n1 1\n")), ValueError,
                     "row 0 repeats a column index"),
            _refuses(f"io.{reader}", "int64_overflow",
                     lambda tmp, r=read: r(_write(tmp, "a.smtx", "1, 3, 1\n0 1\n12345678901234567890\n")), ValueError,
                     "must be integers below 2**63"),
            _refuses(f"io.{reader}", "wrong_dtype", lambda tmp, r=read: r(_write(tmp, "a.smtx", "1, 3, 0\n0 0\n\n"),
                                                                          dtype=np.int32), TypeError, "dtype: must be"),
            _gives(f"io.{reader}", "empty", lambda tmp, r=read: r(_write(tmp, "a.smtx", "2, 3, 0\n0 0 0\n\n")),
                   lambda got: got.shape == (2, 3) and got.nnz == 0),
        ]
    for reader in ("read_mtx", "read_matrix"):
        read = getattr(io, reader)
        cases += [
            _refuses(f"io.{reader}", "corrupt_file", lambda tmp, r=read: r(_write(tmp, "a.mtx", "garbage\n")),
                     ValueError, "a.mtx: not a readable Matrix Market header"),
            _refuses(f"io.{reader}", "empty_file", lambda tmp, r=read: r(_write(tmp, "a.mtx", "")), ValueError,
                     "not a readable Matrix Market header"),
            _refuses(f"io.{reader}", "truncated_file",
                     lambda tmp, r=read: r(_write(tmp, "a.mtx", MTX + "2 3 2\n1 1 1\n")),
                     ValueError, "not a readable Matrix Market file"),
            _refuses(f"io.{reader}", "absurd_header",
                     lambda tmp, r=read: r(_write(tmp, "a.mtx", MTX + "1000000000000 3 1\n1 1 1\n")), ValueError,
                     "header declares 1000000000000 rows"),
            _refuses(f"io.{reader}", "nan", lambda tmp, r=read: r(_write(tmp, "a.mtx", MTX + "2 3 1\n1 2 nan\n")),
                     ValueError, "values must be finite"),
            _refuses(f"io.{reader}", "inf", lambda tmp, r=read: r(_write(tmp, "a.mtx", MTX + "2 3 1\n1 2 inf\n")),
                     ValueError, "values must be finite"),
            _refuses(f"io.{reader}", "dtype_overflow",
                     lambda tmp, r=read: r(_write(tmp, "a.mtx", MTX + "2 3 1\n1 2 1e6\n"), dtype=np.float16),
                     ValueError, "overflows float16"),
            _refuses(f"io.{reader}", "negative_index",
                     lambda tmp, r=read: r(_write(tmp, "a.mtx", MTX + "2 3 1\n0 1 1\n")),
                     ValueError, "not a readable Matrix Market file", "index out of bounds"),
            _refuses(f"io.{reader}", "index_out_of_range",
                     lambda tmp, r=read: r(_write(tmp, "a.mtx", MTX + "2 3 1\n1 4 1\n")), ValueError,
                     "index out of bounds"),
            _gives(f"io.{reader}", "duplicate_index",                       # Matrix Market duplicates: summed
                   lambda tmp, r=read: r(_write(tmp, "a.mtx", MTX + "2 3 2\n1 1 1.0\n1 1 2.5\n")).to_dense(),
                   _same_dense(np.array([[3.5, 0, 0], [0, 0, 0]], dtype=np.float32))),
            _refuses(f"io.{reader}", "wrong_dtype",
                     lambda tmp, r=read: r(_write(tmp, "a.mtx", MTX + "2 3 0\n"), dtype=np.int64), TypeError,
                     "dtype: must be"),
            _gives(f"io.{reader}", "empty", lambda tmp, r=read: r(_write(tmp, "a.mtx", MTX + "2 3 0\n")),
                   lambda got: got.shape == (2, 3) and got.nnz == 0),
        ]
    cases.append(_refuses("io.read_matrix", "wrong_suffix", lambda tmp: io.read_matrix(_write(tmp, "a.txt", "")),
                          ValueError, "path: expected a .smtx or .mtx file"))
    for writer in ("write_smtx", "write_mtx"):
        write = getattr(io, writer)
        cases += [
            _refuses(f"io.{writer}", "not_a_csr", lambda tmp, w=write: w(tmp / "out", DENSE), TypeError,
                     "csr: expected a sparsekit.formats.CSR", "got ndarray"),
            _refuses(f"io.{writer}", "index_out_of_range", lambda tmp, w=write: w(tmp / "out", bad_csr), ValueError,
                     "indices: ", "found 8"),
            _refuses(f"io.{writer}", "negative_index",
                     lambda tmp, w=write: w(tmp / "out", _with_index("CSR", 0, -1)), ValueError, "found -1"),
            _refuses(f"io.{writer}", "duplicate_index",
                     lambda tmp, w=write: w(tmp / "out", duplicate_csr), ValueError, "no duplicates"),
            _refuses(f"io.{writer}", "nan", lambda tmp, w=write: w(tmp / "out", nan_csr), ValueError,
                     "data: must be finite"),
            _gives(f"io.{writer}", "empty",
                   lambda tmp, w=write, suffix=writer.split("_")[1]: (w(tmp / f"e.{suffix}", empty_csr),
                                                             io.read_matrix(tmp / f"e.{suffix}"))[1],
                   lambda got: got.shape == (3, 4) and got.nnz == 0),
        ]
    cases += [
        _refuses("io.seeded_values", "negative", lambda tmp: io.seeded_values(-1), ValueError, "nnz: must be >= 0"),
        _refuses("io.seeded_values", "wrong_dtype", lambda tmp: io.seeded_values(2.5), TypeError,
                 "nnz: expected an integer"),
        _refuses("io.seeded_values", "wrong_value_dtype", lambda tmp: io.seeded_values(3, dtype=np.int32), TypeError,
                 "dtype: must be"),
        _refuses("io.seeded_values", "negative_seed", lambda tmp: io.seeded_values(3, seed=-1), ValueError,
                 "seed: must be >= 0"),
        _gives("io.seeded_values", "empty", lambda tmp: io.seeded_values(0), lambda got: got.shape == (0,)),
    ]
    return cases


def _prune_cases() -> list[Case]:
    cases = [_refuses(entry, "empty", lambda tmp, c=call: c(np.zeros((0, 8), dtype=np.float32)), ValueError,
                      name, "must hold at least one element, got shape (0, 8)")
             for entry, (call, name) in ((f"prune.{k}", v) for k, v in PRUNERS.items())]
    sched = dict(initial_sparsity=0.0, final_sparsity=0.5, begin_step=0, end_step=4)
    cases += [
        _refuses("prune.gradual_schedule", "negative", lambda tmp: prune.gradual_schedule(-1, **sched), ValueError,
                 "step: must be >= 0"),
        _refuses("prune.gradual_schedule", "wrong_dtype", lambda tmp: prune.gradual_schedule(1.5, **sched), TypeError,
                 "step: expected an integer"),
        _refuses("prune.gradual_schedule", "nan",
                 lambda tmp: prune.gradual_schedule(1, **dict(sched, initial_sparsity=float("nan"))), ValueError,
                 "initial_sparsity: must lie in"),
        _refuses("prune.halving_schedule", "negative", lambda tmp: prune.halving_schedule(-1), ValueError,
                 "rounds: must be >= 1"),
        _refuses("prune.halving_schedule", "wrong_dtype", lambda tmp: prune.halving_schedule("3"), TypeError,
                 "rounds: expected an integer"),
        _refuses("prune.halving_schedule", "nan", lambda tmp: prune.halving_schedule(3, float("nan")), ValueError,
                 "start: must lie in"),
    ]
    return cases


def _cache_lookup(tmp, text: str):
    """``tune.resolve(config="auto")`` with the cache file holding ``text``: the heuristic, with one warning."""
    path = tmp / "uspmm.json"
    path.write_text(text)
    dell = SimpleNamespace(shape=(64, 128), dtype=np.dtype(np.float32),
                           host=SimpleNamespace(kprime=16, indices=np.zeros((64, 16), dtype=np.int32)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPARSEKIT_TUNE_CACHE", str(path))
        patch.setattr(tune, "_device_name", lambda: "test-gpu")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = tune.resolve("auto", dell, 8, "C")
    return got, [str(w.message) for w in caught]


def _cache_cases() -> list[Case]:
    heuristic = tune.heuristic(64, 128, 8, 16, np.float32, "C")
    key = tune.problem_key("test-gpu", 64, 128, 8, 16, np.float32, np.int32, "C")
    return [_gives("tune.resolve", f"corrupt_cache:{label}", lambda tmp, t=text: _cache_lookup(tmp, t),
                   lambda got: got[0] == heuristic and len(got[1]) == 1 and "tune cache" in got[1][0])
            for label, text in (("empty", ""), ("truncated", '{"a": '), ("foreign", '["not", "ours"]'),
                                ("entry_without_config", json.dumps({key: {"median_us": 1.0}})),
                                ("entry_without_variant", json.dumps({key: {"config": {"nwarp": 4}}})))]


CASES = _format_cases() + _constructor_cases() + _scipy_cases() + _io_cases() + _prune_cases() + _cache_cases()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.entry}-{c.bad}" for c in CASES])
def test_bad_input_is_refused_by_name_or_answered_correctly(case, tmp_path):
    if case.raises is None:
        assert case.check(case.call(tmp_path))
        return
    with pytest.raises(case.raises) as info:
        case.call(tmp_path)
    message = str(info.value)
    assert all(text in message for text in case.texts), message


#: Public callables that take no user data worth a row, with the reason.
EXEMPT = {"formats.NBytes": "a result type (a NamedTuple of three byte counts), built by nbytes() only"}


def _public_surface() -> set[str]:
    """Every public function of sparsekit.formats, io and prune, and every public method of each format class."""
    names = set()
    for module, prefix in ((formats, "formats"), (io, "io"), (prune, "prune")):
        for name in module.__all__:
            obj = getattr(module, name)
            names.add(f"{prefix}.{name}")
            if isinstance(obj, type) and hasattr(obj, "from_dense"):
                names |= {f"{prefix}.{name}.{m}" for m in dir(obj)
                          if not m.startswith("_") and callable(getattr(obj, m))}
    return names


def test_matrix_covers_every_public_function():
    covered = {c.entry for c in CASES} | set(ENTRY_POINTS)
    missing = _public_surface() - covered - set(EXEMPT)
    assert missing == set(), f"public entry points with no row in the bad-input matrix: {sorted(missing)}"
    assert set(EXEMPT) <= _public_surface()                 # no stale exemption
