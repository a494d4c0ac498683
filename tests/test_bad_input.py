"""Bad input matrix: every public entry point against every class of bad input.

Each case is one call of one entry point with one class of bad input (NaN/Inf,
wrong dtype, wrong rank or shape, out-of-range or negative index, unsorted or
duplicate index, empty, non-contiguous, a shape past 32-bit indexing, a corrupt
file, a corrupt tune cache) and asserts the one acceptable outcome: a
``TypeError``/``ValueError`` whose message names the argument (and the rule),
or the correct result. The modules' own tests check the exact rules; this one
checks that no entry point forgets a class. Everything runs on the CUDA
simulator at 16 x 16 (under a minute).

Coverage guard (:func:`test_every_public_entry_point_is_in_the_matrix`): every
public function of the modules in ``GUARDED`` (their ``__all__``, else their
public functions) and every public method of every sparse format class must
be named by a case
(``Case.entry``) or listed in ``NOT_ENTRY_POINTS`` with the reason; every
module under ``sparsekit/gpu/`` and ``sparsekit/`` must be in ``GUARDED`` or in
``UNGUARDED_MODULES``. To add an entry point (a new launcher, dtype path or
module such as a torch layer or a decode kernel):

1. a new module: add its name to ``GUARDED`` (or, if it has no entry point
   that takes user data, to ``UNGUARDED_MODULES`` with the reason);
2. a launcher ``f(a, b)`` of a sparse matrix and a dense operand: one line in
   ``_launchers`` (entry name -> call, good matrix, good operand, the
   operand's name, its contracted axis); the operand classes and the matrix
   classes then apply to it by themselves (a bfloat16 path of a covered
   launcher: one more line with bfloat16 operands, named e.g.
   ``"gpu.uspmm.uspmm[bfloat16]"``);
3. a sparse format class (every public method of each is guarded): one line
   in ``FROM_DENSE`` (its weight classes), in ``MAKE``, ``INDEX_FIELD`` and
   ``INDEX_BADS`` (its stored-index classes through every reader, ``convert``
   and ``from_csr``, NaN values, empty matrices) and its constructor's rows in
   ``_constructor_cases``; a format whose indices are not one column-like
   array gets its own edits, as ``TILED_EDITS`` does for ``TiledCSL`` and ``BITMAP_EDITS`` (with
   ``_bitmap_cases``) for ``TiledBitmap``;
4. anything else: cases from a builder (``_rnn_cases`` and its siblings, or a
   new one added to ``_all_cases``): ``Case(entry, class, call, exc, text)``,
   ``text`` the parts the message must hold, separated by ``|``; ``exc=None``
   with a ``call`` that asserts the correct result itself;
5. a helper that only takes sizes or names of the package itself: an entry in
   ``NOT_ENTRY_POINTS`` with the reason.

Sparsity outside [0, 1) is covered for every pruner by
``tests/test_prune.py::test_bad_sparsity`` and not repeated here.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib
import inspect
import json
import pkgutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import numpy as np
import pytest
import scipy.sparse as sp

from sparsekit import formats, io, prune, rnn_layout, roofline, tune, tune_cache
from sparsekit.checks import BFLOAT16
from sparsekit.cli import build_parser, main
from tests.spmm_close import assert_spmm_close

ROOT = Path(__file__).resolve().parents[1]

GOOD = np.arange(1, 65, dtype=np.float32).reshape(8, 8) * np.where(np.arange(64) % 3, 1, -1).reshape(8, 8)


# ---------------------------------------------------------------- the cases

@dataclass(frozen=True)
class Case:
    """One call of ``entry`` with input of class ``bad``: it raises ``exc`` whose message holds every
    ``|``-separated part of ``text``, or (``exc`` None) returns a value ``check`` accepts (no ``check``: the call
    asserts its result itself). ``call`` takes the scratch folder when it has a parameter without default."""

    entry: str
    bad: str
    call: Callable
    exc: type | None = None
    text: str = ""
    check: Callable | None = None
    xfail: str = ""             #: a known gap, named; strict, so fixing it makes the case fail until this goes

    @property
    def id(self) -> str:
        return f"{self.entry}-{self.bad}"

    def run(self, tmp: Path):
        needs_tmp = any(p.default is p.empty for p in inspect.signature(self.call).parameters.values())
        return self.call(tmp) if needs_tmp else self.call()


def _refuses(entry, bad, call, exc, *texts) -> Case:
    return Case(entry, bad, call, exc, "|".join(texts))


def _gives(entry, bad, call, check) -> Case:
    return Case(entry, bad, call, check=check)


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
WEIGHT_TAKERS = {**{f"prune.{k}": v for k, v in PRUNERS.items()},
                 **{f"formats.{k}.from_dense": v for k, v in FROM_DENSE.items()},
                 "rnn_layout.balance": (lambda w: rnn_layout.balance(w, tpr=2), "u")}
# 4-D conv weights are accepted by pruners but not by formats (a format is a matrix).
CONV_OK = {f"prune.{k}" for k in PRUNERS}
# TiledCSL and TiledBitmap hold half-precision values only: their weight classes differ (float32 is a dtype error
# there).
HALF = GOOD.astype(np.float16)
HALF_FROM_DENSE = {"TiledCSL": lambda w: formats.TiledCSL.from_dense(w, tile=(4, 4)),
                   "TiledBitmap": lambda w: formats.TiledBitmap.from_dense(w)}


def _weight_cases() -> list[Case]:
    cases = []
    for entry, (call, argname) in WEIGHT_TAKERS.items():
        for bad, (transform, exc, text) in WEIGHT_CLASSES.items():
            cases.append(Case(entry, bad, lambda c=call, t=transform: c(t(GOOD)), exc, f"{argname}|{text}"))
    tiled = {"not_2d": (HALF.reshape(-1), ValueError, "dense: expected a 2-D"),
             "float32": (GOOD, TypeError, "dense"), "nan": (_nan(HALF), ValueError, "dense: must be finite"),
             "inf": (_inf(HALF), ValueError, "dense: must be finite"), "not_array": (HALF.tolist(), TypeError, "dense")}
    for name, from_dense in HALF_FROM_DENSE.items():
        for bad, (w, exc, text) in tiled.items():
            cases.append(Case(f"formats.{name}.from_dense", bad, lambda f=from_dense, w=w: f(w), exc, text))
    return cases


# ------------------------------------------------- formats, SciPy, files, pruners, the cache lookup

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
        if cls is formats.ELL:                                    # any CSR as ELL: rows padded to the longest
            cases.append(_gives("formats.ELL.padded_from_csr", "empty",
                                lambda tmp: formats.ELL.padded_from_csr(formats.CSR.from_dense(empty_dense)).to_dense(),
                                _same_dense(empty_dense)))
            cases.append(_refuses("formats.ELL.padded_from_csr", "index_out_of_range",
                                  lambda tmp: formats.ELL.padded_from_csr(bad_csr), ValueError, "indices: ", "found 8"))
            cases.append(_refuses("formats.ELL.padded_from_csr", "wrong_type",
                                  lambda tmp: formats.ELL.padded_from_csr(DENSE), TypeError, "csr: expected a CSR"))
        if hasattr(cls, "to_scipy"):
            cases.append(_gives(f"formats.{name}.to_scipy", "empty",
                                lambda tmp, n=name: MAKE[n](empty_dense, None).to_scipy().toarray(),
                                _same_dense(empty_dense)))
    return cases


def _convert_options(name: str) -> dict:
    return {"BlockedELL": dict(block=2), "NM": dict(n=2, m=4), "BSR": dict(blocksize=(2, 2))}.get(name, {})


# ------------------------------------------------- stored indices beyond the format table below

def _at(a: np.ndarray, j: int) -> tuple:
    """Position of the ``j``-th stored index of the first row (1-D: ``j``; 2-D: row 0, slot ``j``)."""
    return (0,) * (a.ndim - 1) + (j,)


def _negative(a):
    a[_at(a, 0)] = -1


def _with_swapped_indices(name: str):
    """The good instance of ``name`` with its first row's first two stored indices swapped (unsorted)."""
    x = _good(name)
    field = INDEX_FIELD[name]
    idx = getattr(x, field).copy(order="K")
    idx[_at(idx, 0)], idx[_at(idx, 1)] = idx[_at(idx, 1)], idx[_at(idx, 0)]
    return dataclasses.replace(x, **{field: idx})


def _tiled(edit=None):
    t = formats.TiledCSL.from_dense((DENSE / 8).astype(np.float16), tile=(4, 4))
    if edit is not None:
        edit(t)
    return t


TILED_EDITS = {   # class -> (edit, text): the words hold a local index in their high half
    "index_out_of_range": (lambda t: t.words.__setitem__(0, np.uint32(t.sink + 1) << np.uint32(16)),
                           "words: local index 17 exceeds"),
    "duplicate_index": (lambda t: t.words.__setitem__(1, t.words[0]), "words: local indices should ascend"),
    "negative_index": (lambda t: t.offsets.__setitem__(1, -4), "offsets: should ascend"),
    "unsorted_index": (lambda t: t.offsets.__setitem__(1, 3), "offsets: should ascend in multiples of 4"),
}


def _bitmap(edit=None):
    """``DENSE`` as a TiledBitmap: two fragments (columns 0, 1 and 4, 5 of the 8 rows), each its 16-byte unit of
    bitmaps (cell 0's ``0x11111111``: lanes 0, 4, .., 28, a pair of row 0-7 each) and 8 pairs in 2 more units
    (``offsets = [0, 3, 6]``); ``edit`` changes its arrays in place."""
    b = formats.TiledBitmap.from_dense((DENSE / 8).astype(np.float16))
    if edit is not None:
        edit(b)
    return b


def _first_pair_past_the_edge(b):
    """Fragment 0's first marked pair (cell 0, lane 0: row 0, columns 0, 1) moved to lane 1 (row 0, logical columns
    2, 3: columns 8, 9): the counts and the record's length stay, the pair lies past the matrix's 8 columns."""
    b.stream[0] = b.stream[0] & ~np.uint32(1) | np.uint32(2)


def _five_more_pairs(fragment: int):
    """An edit marking lanes 0-4 of cell 2 of ``fragment``: 13 pairs in a record of room for 8."""
    return lambda b: b.stream.__setitem__(4 * b.offsets[fragment] + 2, np.uint32(0x1F))


def _set_stream_half(at: int, bits: int):
    """An edit writing ``bits`` at 16-bit position ``at`` of the stream."""
    return lambda b: b.stream.view(np.uint16).__setitem__(at, bits)


BITMAP_OFFSET_EDITS = {   # class -> (edit, text): the records' starts in 16-byte units
    "offsets_not_spanning_stream": (lambda b: b.offsets.__setitem__(-1, 7),
                                    "offsets: should start at 0 and end at stream.size / 4"),
    "negative_index": (lambda b: b.offsets.__setitem__(1, -4),
                       "offsets: fragment 0 is shorter than the 16-byte unit of its bitmaps"),
    "unsorted_index": (lambda b: b.offsets.__setitem__(1, 7),           # (record 1 would start past the stream)
                       "offsets: fragment 1 is shorter than the 16-byte unit of its bitmaps"),
}
BITMAP_EDITS = {   # the offsets' classes and the stream's; a bitmap cannot name a position twice (no duplicates)
    **BITMAP_OFFSET_EDITS,
    "record_too_short": (_five_more_pairs(0),              # (its pairs run on into record 1)
                         "offsets: fragment 0 spans 3 16-byte units, its bitmaps mark 13 pairs: expected 5"),
    "record_past_stream": (_five_more_pairs(1),            # (the last record: its pairs run past the stream)
                           "offsets: fragment 1 spans 3 16-byte units, its bitmaps mark 13 pairs: expected 5"),
    "index_out_of_range": (_first_pair_past_the_edge, "stream: a bitmap marks an entry outside the (8, 8) matrix"),
    "nan": (_set_stream_half(8, 0x7E00), "stream: values must be finite"),   # fragment 0's first pair, low half
    "inf": (_set_stream_half(8, 0xFC00), "stream: values must be finite"),
}
#: The readers without the full check that still refuse a stream edit, by class: ``nbytes`` reads every marked
#: pair, and the last record's cannot lie past the stream.
BITMAP_STREAM_REFUSALS = {
    "record_past_stream": {"nbytes": "offsets: the bitmaps mark more pairs than the stream holds"},
}


def _bitmap_reads_its_stream(edit, method: str):
    """``masks``, ``counts`` or ``nbytes`` of a TiledBitmap whose stream (not offsets) is corrupt: what the stream
    holds, read here without the format's code: each record's first 4 words, their set bits, the arrays' bytes
    (values: 2 a nonzero half of the words after a record's bitmaps, as many as they mark)."""
    b = _bitmap(edit)
    masks = np.stack([b.stream[4 * o:4 * o + 4] for o in b.offsets[:-1]])
    marked = np.array([sum(bin(int(w)).count("1") for w in record) for record in masks])
    pairs = np.concatenate([b.stream[4 * o + 4:4 * o + 4 + n] for o, n in zip(b.offsets[:-1], marked)])
    values = 2 * int(np.count_nonzero(pairs.view(np.uint16)))
    total = 4 * b.stream.size + b.offsets.nbytes
    want = {"masks": masks, "counts": marked, "nbytes": formats.NBytes(values, total - values, total)}[method]
    got = getattr(b, method)()
    assert np.array_equal(got, want) and np.asarray(got).dtype == np.asarray(want).dtype, (got, want)


def _half_csr_past_the_edge():
    """``DENSE`` in float16 as a CSR whose last column index is 8 (the constructor's cheap checks pass it)."""
    csr = formats.CSR.from_dense(DENSE.astype(np.float16))
    indices = csr.indices.copy()
    indices[-1] = 8
    return dataclasses.replace(csr, indices=indices)


def _bitmap_cases() -> list[Case]:
    """TiledBitmap's offsets and stream through every reader: refused by name; ``masks``, ``counts``, ``nbytes``
    (no full check) refuse an offset edit by name, and a stream edit where :data:`BITMAP_STREAM_REFUSALS` says,
    and give what the stream holds otherwise; empty matrices."""
    cases = []
    readers = {**READERS, "convert": lambda x: formats.convert(x, formats.COO)}
    for bad, (edit, text) in BITMAP_EDITS.items():
        for method, read in readers.items():
            entry, name = ("formats.convert", f"{bad}:TiledBitmap") if method == "convert" else \
                (f"formats.TiledBitmap.{method}", bad)
            cases.append(Case(entry, name, lambda e=edit, r=read: r(_bitmap(e)), ValueError, text))
        for method in ("masks", "counts", "nbytes"):
            refusal = text if bad in BITMAP_OFFSET_EDITS else BITMAP_STREAM_REFUSALS.get(bad, {}).get(method)
            if refusal:
                cases.append(Case(f"formats.TiledBitmap.{method}", bad,
                                  lambda e=edit, m=method: getattr(_bitmap(e), m)(), ValueError, refusal))
            else:
                cases.append(Case(f"formats.TiledBitmap.{method}", bad,
                                  lambda e=edit, m=method: _bitmap_reads_its_stream(e, m)))
    empty = np.zeros((0, 8), np.float16)
    make = formats.TiledBitmap.from_dense
    cases += [_gives("formats.TiledBitmap.from_dense", "empty", lambda: make(empty).to_dense(), _same_dense(empty)),
              _gives("formats.TiledBitmap.mask", "empty", lambda: make(empty).mask(),
                     lambda got: got.shape == (0, 8) and got.dtype == bool),
              _gives("formats.TiledBitmap.to_csr", "empty", lambda: make(empty).to_csr(),
                     lambda got: got.nnz == 0 and got.shape == (0, 8)),
              _gives("formats.TiledBitmap.from_csr", "empty",
                     lambda: formats.TiledBitmap.from_csr(formats.CSR.from_dense(empty)).to_dense(),
                     _same_dense(empty)),
              _gives("formats.TiledBitmap.counts", "empty", lambda: make(empty).counts(),
                     lambda got: got.shape == (0,) and got.dtype == np.int64),
              _gives("formats.TiledBitmap.masks", "empty", lambda: make(empty).masks(),
                     lambda got: got.shape == (0, 4) and got.dtype == np.uint32),
              _gives("formats.TiledBitmap.nbytes", "empty", lambda: make(empty).nbytes(),
                     lambda got: got == formats.NBytes(0, 8, 8)),
              Case("formats.TiledBitmap.from_csr", "index_out_of_range",
                   lambda: formats.TiledBitmap.from_csr(_half_csr_past_the_edge()), ValueError,
                   "entries must lie inside the (8, 8) matrix")]
    return cases


def _index_cases() -> list[Case]:
    """Unsorted indices through every reader, TiledCSL's words and offsets, shapes past an index dtype, SciPy
    values that are not finite in the dtype."""
    cases = []
    for name in MAKE:
        readers = dict(READERS)
        if hasattr(getattr(formats, name), "to_scipy"):
            readers["to_scipy"] = lambda x: x.to_scipy(dtype=np.float64)
        for method, read in readers.items():
            cases.append(Case(f"formats.{name}.{method}", "unsorted_index",
                              lambda n=name, r=read: r(_with_swapped_indices(n)), ValueError,
                              f"{INDEX_FIELD[name]}: |sorted"))
    for bad, (edit, text) in TILED_EDITS.items():
        for method in ("to_dense", "mask", "to_csr", "validate"):
            cases.append(Case(f"formats.TiledCSL.{method}", bad,
                              lambda e=edit, r=READERS[method]: r(_tiled(e)), ValueError, text))
    half = np.ones(2, np.float16)
    for name in HALF_FROM_DENSE:
        from_coords = getattr(formats, name).from_coords
        for bad, args, exc, text in [
                ("nan", ([0], [1], np.array([np.nan], np.float16)), ValueError, "values: must be finite"),
                ("wrong_shape", ([0, 1], [1], half), ValueError, "cols: "),
                ("index_out_of_range", ([0, 9], [0, 1], half), ValueError, "rows, cols: entries must lie inside"),
                ("negative_index", ([0, 0], [0, -1], half), ValueError, "rows, cols: entries must lie inside"),
                ("duplicate_index", ([0, 0], [1, 1], half), ValueError, "rows, cols: a position is given twice"),
                ("float32", ([0], [1], np.ones(1, np.float32)), TypeError, "values: dtype")]:
            cases.append(Case(f"formats.{name}.from_coords", bad, lambda f=from_coords, a=args: f(*a, (4, 4)), exc,
                              text))
        cases.append(Case(f"formats.{name}.from_csr", "wrong_type", lambda c=getattr(formats, name): c.from_csr(DENSE),
                          TypeError, "csr: expected"))
    cases += [
              Case("formats.TiledCSL.from_ell", "wrong_type", lambda: formats.TiledCSL.from_ell(DENSE), TypeError,
                   "ell: expected an ELL"),
              Case("formats.TiledCSL.row_tile", "negative", lambda: formats.TiledCSL.row_tile(-3), ValueError,
                   "cols: must be >= 0"),
              _gives("formats.TiledCSL.nbytes", "duplicate_index",            # counts arrays, reads no index
                     lambda: _tiled(TILED_EDITS["duplicate_index"][0]).nbytes(), lambda got: got == _tiled().nbytes())]
    bf16_nan = GOOD.astype(BFLOAT16)
    bf16_nan[1, 1] = np.nan
    cases += [Case(entry, "bfloat16_nan", lambda c=call: c(bf16_nan), ValueError, "finite")
              for entry, call in [("formats.CSR.from_dense", formats.CSR.from_dense),
                                  ("prune.magnitude", lambda w: prune.magnitude(w, 0.5))]]
    cases.append(Case("formats.CSR", "int32_overflowing_shape",
                      lambda: formats.CSR(np.array([0, 1], np.int32), np.array([0], np.int32),
                                          np.ones(1, np.float32), (1, 2**31 + 5)), ValueError, "indices"))
    cases.append(Case("formats.ELL.from_dense", "int16_overflowing_shape",
                      lambda: formats.ELL.from_dense(np.ones((1, 40000), np.float32), index_dtype=np.int16),
                      ValueError, "index_dtype"))
    nan = sp.csr_matrix(np.array([[np.nan, 1.0]], np.float32))
    big = sp.csr_matrix(np.array([[7e4, 1.0]], np.float32))
    for name in ("CSR", "COO", "BSR"):
        from_scipy = getattr(formats, name).from_scipy
        cases += [Case(f"formats.{name}.from_scipy", "nan", lambda f=from_scipy: f(nan), ValueError, "a: |finite"),
                  Case(f"formats.{name}.from_scipy", "overflowing_cast",
                       lambda f=from_scipy: f(big, dtype=np.float16), ValueError, "a: |overflows float16")]
    return cases


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
    seen = set()
    for i, case in enumerate(cases):        # read_matrix takes both kinds: its .mtx cases are named so
        cases[i] = dataclasses.replace(case, bad=f"{case.bad}:mtx") if case.id in seen else case
        seen.add(case.id)
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


def _resolve_with_cache(tmp, text: str):
    """``tune.resolve(config="auto")`` with the cache file holding ``text``: the heuristic, with one warning."""
    path = tmp / "uspmm.json"
    path.write_text(text)
    dell = SimpleNamespace(shape=(64, 128), dtype=np.dtype(np.float32),
                           host=SimpleNamespace(kprime=16, indices=np.zeros((64, 16), dtype=np.int32)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPARSEKIT_TUNE_CACHE", str(path))
        patch.setattr(tune_cache, "_device_name", lambda: "test-gpu")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = tune.resolve("auto", dell, 8, "C")
    return got, [str(w.message) for w in caught]


def _resolve_cases() -> list[Case]:
    heuristic = tune.heuristic(64, 128, 8, 16, np.float32, "C")
    key = tune.problem_key("test-gpu", 64, 128, 8, 16, np.float32, np.int32, "C")
    return [_gives("tune.resolve", f"corrupt_cache:{label}", lambda tmp, t=text: _resolve_with_cache(tmp, t),
                   lambda got: got[0] == heuristic and len(got[1]) == 1 and "tune cache" in got[1][0])
            for label, text in (("empty", ""), ("truncated", '{"a": '), ("foreign", '["not", "ours"]'),
                                ("entry_without_config", json.dumps({key: {"median_us": 1.0}})),
                                ("entry_without_variant", json.dumps({key: {"config": {"nwarp": 4}}})))]


# ---------------------------------------------------------------- GPU launchers

def _launchers():
    """entry -> (call(a, b), good matrix, good operand, operand name, contracted axis of the operand)."""
    from sparsekit.gpu import spmm, spmm_bitmap, spmm_lessons, spmm_tiled, uspmm, uspmm_tc, uspmm_wgmma
    from sparsekit.api import spmm as api_spmm

    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 16)).astype(np.float32)
    wu = w * prune.uniform(w, 0.5)
    ell, csr = formats.ELL.from_dense(wu), formats.CSR.from_dense(wu)
    coo = formats.COO.from_dense(wu)
    bell = formats.BlockedELL.from_dense(w * prune.blocked_uniform(w, 0.5, 4), block=4)
    tiled = formats.TiledCSL.from_dense(wu.astype(np.float16), tile=(16, 16))
    bitmap = formats.TiledBitmap.from_dense(wu.astype(np.float16))
    b = rng.standard_normal((16, 4)).astype(np.float32)
    x = np.ascontiguousarray(b.T)
    rows = {
        "gpu.uspmm.uspmm": (uspmm.uspmm, ell, b, "b", 0),
        "gpu.uspmm.uspmm_linear": (uspmm.uspmm_linear, ell, x, "x", 1),
        "gpu.uspmm_tc.uspmm": (uspmm_tc.uspmm, ell, b, "b", 0),
        "gpu.uspmm_wgmma.uspmm": (uspmm_wgmma.uspmm, ell, b, "b", 0),
        "gpu.spmm.spmm_csr": (spmm.spmm_csr, csr, b, "b", 0),
        "gpu.spmm.spmm_coo": (spmm.spmm_coo, coo, b, "b", 0),
        "gpu.spmm.spmm_blocked_ell": (spmm.spmm_blocked_ell, bell, b, "b", 0),
        "gpu.spmm_tiled.spmm_tiled": (spmm_tiled.spmm_tiled, tiled, b.astype(np.float16), "b", 0),
        "gpu.spmm_tiled.spmm_tiled_linear": (spmm_tiled.spmm_tiled_linear, tiled, x.astype(np.float16), "x", 1),
        "gpu.spmm_bitmap.spmm_bitmap": (spmm_bitmap.spmm_bitmap, bitmap, b.astype(np.float16), "b", 0),
        "gpu.spmm_bitmap.spmm_bitmap_linear": (spmm_bitmap.spmm_bitmap_linear, bitmap, x.astype(np.float16), "x", 1),
        "api.spmm": (api_spmm, csr, b, "b", 0),
    }
    for lesson in ("thread_per_row", "warp_per_row", "smem_tiled", "warp_per_row_swizzled", "thread_group",
                   "balanced_blocks", "row_split"):
        rows[f"gpu.spmm_lessons.{lesson}"] = (getattr(spmm_lessons, lesson), csr, b, "b", 0)
    return rows


def _strided(b):
    """The same values as a view that is neither C- nor F-contiguous."""
    wide = np.zeros((b.shape[0], 2 * b.shape[1]), b.dtype)
    wide[:, ::2] = b
    return wide[:, ::2]


def _drop(b, axis):
    return b[:-1] if axis == 0 else b[:, :-1]


def _with_nan(b):
    out = b.copy()
    out.flat[1] = np.nan
    return out


OPERAND_CLASSES = {   # class -> (transform(b, contracted axis), exception, text after the operand's name)
    "float64": (lambda b, ax: b.astype(np.float64), TypeError, "dtype"),
    "int_dtype": (lambda b, ax: b.astype(np.int32), TypeError, "dtype"),
    "1d": (lambda b, ax: b.reshape(-1), ValueError, "2-D"),
    "3d": (lambda b, ax: b.reshape(1, *b.shape), ValueError, "2-D"),
    "wrong_shape": (lambda b, ax: _drop(b, ax), ValueError, "shape"),
    "not_array": (lambda b, ax: b.tolist(), TypeError, "ndarray"),
    "non_contiguous": (lambda b, ax: _strided(b), ValueError, "contiguous"),
}


def _check_product(call, a, b, axis):
    """``call(a, b)`` with a NaN in ``b``, or an empty ``b``: NaN never vanishes and no finite value changes.

    Where a stored entry (explicit zeros included: 0 x NaN is NaN) meets the NaN the result is NaN; entries of the
    product that do not read it are the sparse product within the suite's SpMM bound. Where the NaN meets an entry
    that is not stored, a kernel that multiplies dense tiles (tensor cores: "load as sparse, compute as dense")
    gives NaN as dense cuBLAS does, a gather kernel the sparse sum: either is correct, nothing else is.
    """
    got = np.asarray(call(a, b))
    got = got if axis == 0 else got.T
    dense = a.to_dense()
    bb = np.asarray(b) if axis == 0 else np.asarray(b).T
    nan = np.isnan(bb.astype(np.float64))
    b_zero = np.where(nan, np.zeros((), bb.dtype), bb)
    want = (dense.astype(np.float64) @ b_zero.astype(np.float64)).astype(got.dtype)
    meets = nan.any(axis=0)[None, :] & np.ones(dense.shape[0], bool)[:, None]    # rows x columns that read it
    stored_meets = (a.mask().astype(np.int64) @ nan.astype(np.int64)) > 0
    assert np.isnan(got[stored_meets]).all(), "a NaN of the operand vanished"
    assert_spmm_close(np.where(meets & np.isnan(got), want, got), want, dense, b_zero)


def _launcher_cases() -> list[Case]:
    cases = []
    for entry, (call, a, b, name, axis) in _launchers().items():
        for bad, (transform, exc, text) in OPERAND_CLASSES.items():
            cases.append(Case(entry, bad, lambda c=call, a=a, b=b, t=transform, ax=axis: c(a, t(b, ax)), exc,
                              f"{name}: |{text}"))
        cases.append(Case(entry, "nan_operand", lambda c=call, a=a, b=b, ax=axis: _check_product(c, a, _with_nan(b),
                                                                                                  ax)))
        empty = b[:, :0] if axis == 0 else b[:0]
        if entry.startswith(("gpu.spmm_tiled", "gpu.spmm_bitmap")):       # N from 1 to 64 by design, said so
            cases.append(Case(entry, "empty", lambda c=call, a=a, e=empty: c(a, e), ValueError, f"{name}: "))
        else:
            cases.append(Case(entry, "empty", lambda c=call, a=a, e=empty, ax=axis: _check_product(c, a, e, ax)))
        cases.append(Case(entry, "dense_matrix", lambda c=call, a=a, b=b: c(a.to_dense(), b), TypeError,
                          "expected"))
        if isinstance(a, formats.TiledCSL):
            edit, _ = TILED_EDITS["negative_index"]       # (a one-tile matrix: the edited offset is the last)
            cases.append(Case(entry, "negative_index", lambda c=call, a=a, b=b, e=edit: c(_tiled_like(a, e), b),
                              ValueError, "offsets: should"))
        elif isinstance(a, formats.TiledBitmap):          # (two fragments: the edited offset is the middle one)
            edit, text = BITMAP_EDITS["negative_index"]
            cases.append(Case(entry, "negative_index", lambda c=call, a=a, b=b, e=edit: c(_tiled_like(a, e), b),
                              ValueError, text))
        else:
            cases.append(Case(entry, "negative_index",
                              lambda c=call, a=a, b=b: c(_edited(a, _negative), b), ValueError, "must lie in"))
    return cases + _upload_cases()


def _upload_cases() -> list[Case]:
    """``spmm_bitmap.upload`` (``prepare`` without the full scan, for a TiledBitmap its constructors made): the
    cheap checks still refuse; what only the full scan finds is the caller's promise, not a case."""
    from sparsekit.gpu import spmm_bitmap

    edit, text = BITMAP_EDITS["offsets_not_spanning_stream"]
    huge = np.broadcast_to(np.uint32(0), (2**30 + 4,))            # 2**32 + 16 bytes that take no memory
    return [Case("gpu.spmm_bitmap.upload", "dense_matrix", lambda: spmm_bitmap.upload(DENSE), TypeError,
                 "a: expected a TiledBitmap"),
            Case("gpu.spmm_bitmap.upload", "offsets_not_spanning_stream", lambda: spmm_bitmap.upload(_bitmap(edit)),
                 ValueError, text),
            Case("gpu.spmm_bitmap.upload", "int32_overflowing_shape",
                 lambda: spmm_bitmap.upload(formats.TiledBitmap(huge, np.array([0, 3, 2**28 + 1]), (16, 16),
                                                                np.float16)),
                 ValueError, "a.stream: at most 2**31 - 1")]


def _valid_input_cases() -> list[Case]:
    """Valid calls that must not be refused: each USpMM variant with its own default tunables."""
    call, ell, b, _, axis = _launchers()["gpu.uspmm.uspmm"]
    return [Case("gpu.uspmm.uspmm", f"variant_{variant}_defaults",
                 lambda v=variant: _check_product(lambda a, x: call(a, x, variant=v), ell, b, axis))
            for variant in ("listing1", "pipelined", "direct", "dense_tile", "warp_split")]


def _tiled_like(a, edit):
    t = copy.deepcopy(a)
    edit(t)
    return t


def _edited(a, corrupt):
    x = copy.deepcopy(a)
    corrupt(x._index_arrays()[-1])
    return x


class _HugeDeviceArray:
    """A Numba-device-array look-alike of any shape that owns no memory: what a launcher sees of a weight too
    large to allocate here (it must refuse it before allocating anything)."""

    __cuda_ndarray__ = True

    def __init__(self, shape, dtype):
        self.shape, self.dtype, self.ndim = tuple(shape), np.dtype(dtype), len(shape)
        self.strides = (shape[1] * self.dtype.itemsize, self.dtype.itemsize)
        self.size = shape[0] * shape[1]


def _sparsify24_cases() -> list[Case]:
    from sparsekit.gpu import sparsify24

    w = np.random.default_rng(1).standard_normal((32, 32)).astype(np.float16)
    nan = w.copy()
    nan[5, 7] = np.nan
    cases = [Case("gpu.sparsify24.sparsify24", bad, lambda v=v: sparsify24.sparsify24(v), exc, text)
             for bad, v, exc, text in [
                 ("nan", nan, ValueError, "w: "), ("int_dtype", w.astype(np.int16), TypeError, "w: dtype"),
                 ("1d", w.reshape(-1), ValueError, "w: expected a 2-D"),
                 ("wrong_shape", np.ascontiguousarray(w[:, :20]), ValueError, "w.shape[1]: must be divisible by 32"),
                 ("non_contiguous", _strided(w), ValueError, "w: "), ("not_array", w.tolist(), TypeError, "w: ")]]
    for bad, shape, dtype in [("int32_overflowing_shape", (65536, 65536 + 32), np.float16),
                              ("int32_overflowing_shape_fp32", (2**17, 2**20 + 32), np.float32)]:
        cases.append(Case("gpu.sparsify24.prepare", bad,
                          lambda s=shape, d=dtype: sparsify24.prepare(_HugeDeviceArray(s, d)), ValueError,
                          "w: a float|offsets are 32-bit"))
    return cases


# ---------------------------------------------------------------- RNN

def _rnn_cases() -> list[Case]:
    from sparsekit.gpu.persistent_rnn import PersistentRNN, lstm_forward, rnn_forward

    lay = rnn_layout.balance((np.eye(8, dtype=np.float32) + 0.25) / 8, tpr=4)
    lstm = rnn_layout.balance(np.tile(np.eye(8, dtype=np.float32) / 8, (4, 1)), tpr=4)
    bp, h0 = np.zeros((2, 4, 8), np.float32), np.zeros((4, 8), np.float32)
    bp4 = np.zeros((2, 4, 32), np.float32)
    nan = bp.copy()
    nan[0, 1, 2] = np.nan
    run = lambda **kw: rnn_forward(**{"layout": lay, "b_prime": bp, "h0": h0, "steps": 2,  # noqa: E731
                                      "rows_per_block": 8, **kw})
    cases = [Case("gpu.persistent_rnn.rnn_forward", bad, lambda kw=kw: run(**kw), exc, text)
             for bad, kw, exc, text in [
                 ("float64", {"b_prime": bp.astype(np.float64)}, TypeError, "b_prime: dtype"),
                 ("2d", {"b_prime": bp[0]}, ValueError, "b_prime: expected a 3-D"),
                 ("wrong_shape", {"b_prime": np.zeros((2, 4, 7), np.float32)}, ValueError, "b_prime: expected shape"),
                 ("too_few_steps", {"steps": 3}, ValueError, "b_prime: expected shape (>= 3"),
                 ("nan", {"b_prime": nan}, ValueError, "b_prime: must be finite"),
                 ("inf_h0", {"h0": h0 - np.inf}, ValueError, "h0: must be finite"),
                 ("negative_steps", {"steps": -1}, ValueError, "steps: must be >= 0"),
                 ("not_array", {"b_prime": bp.tolist()}, TypeError, "b_prime: expected a numpy.ndarray"),
                 ("not_a_layout", {"layout": np.eye(8, dtype=np.float32)}, TypeError, "layout: expected"),
                 ("huge_spin_limit", {"spin_limit": 2**31 - 1}, ValueError, "spin_limit: must be <= 4194304")]]
    cases.append(Case("gpu.persistent_rnn.rnn_forward", "empty",
                      lambda: np.testing.assert_array_equal(run(steps=0).shape, (0, 4, 8))))
    cases.append(Case("gpu.persistent_rnn.lstm_forward", "c0_missing_shape",
                      lambda: lstm_forward(lstm, bp4, h0, h0[:, :7], 2, rows_per_block=8), ValueError, "c0: "))
    cases.append(Case("gpu.persistent_rnn.lstm_forward", "not_a_layout",
                      lambda: lstm_forward(np.eye(8), bp4, h0, h0, 2), TypeError, "layout: "))

    def edited_layout():
        bad = rnn_layout.balance((np.eye(8, dtype=np.float32) + 0.25) / 8, tpr=4)
        bad.indices[0, 0] = 99
        return PersistentRNN(bad, 4, rows_per_block=8)
    cases.append(Case("gpu.persistent_rnn.PersistentRNN", "index_past_the_end", edited_layout, ValueError,
                      "indices: indices must lie in [0, 8), found 99"))
    for bad, kw, text in [("negative_index", {"indices": -1}, "found -1"), ("nan", {"values": np.nan}, "finite")]:
        def build(kw=kw):
            values, indices = lay.values.copy(), lay.indices.copy()
            (indices if "indices" in kw else values)[1, 1] = next(iter(kw.values()))
            return rnn_layout.RNNLayout(values, indices, lay.shape, lay.tpr, lay.nnz)
        cases.append(Case("rnn_layout.RNNLayout", bad, build, ValueError, text))
    cases += [Case("rnn_layout.check_layout", "not_a_layout", lambda: rnn_layout.check_layout(GOOD), TypeError,
                   "layout: expected"),
              Case("rnn_layout.bank_aware", "not_a_layout", lambda: rnn_layout.bank_aware(GOOD), TypeError, "layout"),
              Case("rnn_layout.bank_conflicts", "bad_batch",
                   lambda: rnn_layout.bank_conflicts(lay, batch=0, scheme="naive", rows_per_block=8), ValueError,
                   "batch"),
              Case("rnn_layout.thread_packed_indices", "not_a_layout",
                   lambda: rnn_layout.thread_packed_indices(GOOD), TypeError, "layout"),
              Case("rnn_layout.pack_indices16", "index_past_the_end",
                   lambda: rnn_layout.pack_indices16(np.array([[0, 70000]], np.int32)), ValueError, "indices"),
              Case("rnn_layout.unpack_indices16", "int_dtype",
                   lambda: rnn_layout.unpack_indices16(np.zeros((2, 2), np.float32)), TypeError, "packed"),
              Case("rnn_layout.split", "negative", lambda: rnn_layout.split(-4, 4, 8), ValueError, "rows"),
              Case("rnn_layout.wavefronts", "bad_width", lambda: rnn_layout.wavefronts([0, 4], 3), ValueError,
                   "width")]
    return cases


# ---------------------------------------------------------------- files, cache, cost model

def _write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def _auto_with_cache(tmp: Path, text: str, monkeypatch):
    """``uspmm(config="auto")`` with ``text`` at the cache path: the right product and one warning."""
    from sparsekit.gpu import uspmm
    from sparsekit import tune, tune_cache

    w = (GOOD * prune.uniform(GOOD, 0.5)).astype(np.float32)
    b = np.linspace(-1, 1, 8 * 3, dtype=np.float32).reshape(8, 3)
    key = tune.problem_key("test-gpu", 8, 8, 3, 4, np.float32, np.int32, "C")     # this very problem's entry
    path = _write(tmp, "uspmm.json", text.replace("KEY", key))
    monkeypatch.setenv("SPARSEKIT_TUNE_CACHE", str(path))
    monkeypatch.setattr(tune_cache, "_device_name", lambda: "test-gpu")
    monkeypatch.setattr(tune_cache, "_LOADED", {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = uspmm.uspmm(formats.ELL.from_dense(w), b, config="auto")
    np.testing.assert_allclose(out, w @ b, rtol=1e-5, atol=1e-5)
    assert len([c for c in caught if "cache" in str(c.message)]) == 1, [str(c.message) for c in caught]


def _cache_cases(tmp: Path, monkeypatch) -> list[Case]:
    texts = {"corrupt_cache": "{not json", "empty_cache": "", "foreign_cache": json.dumps([1, 2, 3]),
             "entry_without_config": json.dumps({"KEY": {"median_us": 3.0}}),
             "stale_cache_entry": json.dumps({"KEY": {"config": {"variant": "tiled", "renamed_tunable": 4}}})}
    return [Case("tune cache (uspmm config='auto')", bad,
                 lambda t=t: _auto_with_cache(tmp, t, monkeypatch)) for bad, t in texts.items()]


def _roofline_cases() -> list[Case]:
    r = roofline
    return [Case("roofline.counts", bad, call, exc, text) for bad, call, exc, text in [
        ("negative", lambda: r.counts("csr", -1, 8, 8, density=0.5), ValueError, "m: must be >= 1"),
        ("nan", lambda: r.counts("csr", 8, 8, 8, density=float("nan")), ValueError, "density: must lie in"),
        ("out_of_range", lambda: r.counts("csr", 8, 8, 8, density=1.5), ValueError, "density: must lie in"),
        ("negative_nnz", lambda: r.counts("csr", 8, 8, 8, nnz=-3), ValueError, "nnz: must be >= 0"),
        ("float_size", lambda: r.counts("csr", 8.5, 8, 8, density=0.5), TypeError, "m: expected an integer"),
        ("unknown_kind", lambda: r.counts("bogus", 8, 8, 8), ValueError, "kind: unknown format")]] + [
        Case("roofline.counts_of", "not_a_format", lambda: r.counts_of(GOOD, 4), TypeError, "fmt: expected"),
        Case("roofline.speed_of_light", "not_a_format", lambda: r.speed_of_light(GOOD, n=4), TypeError, "fmt: "),
        Case("roofline.roof", "unknown_device", lambda: r.roof("nope"), ValueError, "device: unknown"),
        Case("roofline.model_sol", "unknown_pattern", lambda: r.model_sol([], "bogus"), ValueError, "kind: "),
        Case("roofline.parse_kind", "not_a_name", lambda: r.parse_kind(3), TypeError, "kind: "),
        Case("roofline.dtype_name", "unknown_dtype", lambda: r.dtype_name("int7"), ValueError, "dtype: "),
        Case("roofline.sol_of", "not_counts", lambda: r.sol_of("x"), TypeError, "c: "),
        Case("roofline.compare", "not_sol", lambda: r.compare(1, 2, 3, 4), TypeError, "dense: "),
    ]


# ---------------------------------------------------------------- the matrix test

def _all_cases(tmp: Path, monkeypatch) -> list[Case]:
    """Every case; ``tmp`` is where the cache cases write (nothing is written until a case runs)."""
    return (_weight_cases() + _format_cases() + _index_cases() + _bitmap_cases() + _constructor_cases()
            + _scipy_cases() + _io_cases() + _prune_cases() + _resolve_cases() + _launcher_cases()
            + _valid_input_cases() + _sparsify24_cases() + _rnn_cases() + _cache_cases(tmp, monkeypatch)
            + _roofline_cases())


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> dict[str, Case]:
    patch = pytest.MonkeyPatch()
    yield {c.id: c for c in _all_cases(tmp_path_factory.mktemp("bad"), patch)}
    patch.undo()


def _case_ids() -> list[str]:
    """The ids, known at collection (the calls run inside the test)."""
    ids = [c.id for c in _all_cases(Path("/nonexistent"), None)]
    shared = sorted({i for i in ids if ids.count(i) > 1})
    assert not shared, f"cases sharing an id: {shared}"
    return ids


@pytest.mark.parametrize("case_id", _case_ids())
def test_bad_input_is_refused_by_name_or_answered_correctly(cases, case_id, request, tmp_path):
    case = cases[case_id]
    if case.xfail:
        request.applymarker(pytest.mark.xfail(reason=case.xfail, strict=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=Warning)   # (the simulator's occupancy warnings)
        if case.exc is None:
            got = case.run(tmp_path)
            assert case.check is None or case.check(got), got
            return
        with pytest.raises((TypeError, ValueError)) as info:
            case.run(tmp_path)
    assert isinstance(info.value, case.exc), f"{type(info.value).__name__}: {info.value}"
    message = str(info.value)
    assert all(part in message for part in case.text.split("|")), message


def test_good_weight_is_accepted_and_not_modified():
    for entry, (call, _) in WEIGHT_TAKERS.items():
        w = GOOD.copy()
        w.setflags(write=False)
        call(w)
        assert np.array_equal(w, GOOD), entry


@pytest.mark.parametrize("entry", sorted(WEIGHT_TAKERS))
def test_conv_weights_only_where_documented(entry):
    call, _ = WEIGHT_TAKERS[entry]
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


def test_uniform_ell_refuses_rows_of_different_length():
    ragged = GOOD.copy()
    ragged[0, :3] = 0
    with pytest.raises(ValueError, match="row"):
        formats.ELL.from_dense(ragged)


# ---------------------------------------------------------------- the CLI

def _subcommands(parser, path=()):
    """(words, sub-parser) of every leaf command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _subcommands(sub, (*path, name))
                if not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                    yield (*path, name), sub


def _typed_flags():
    from sparsekit import cli_types

    for words, sub in _subcommands(build_parser()):
        for action in sub._actions:
            if action.option_strings and action.type is not None:
                yield words, sub, action, cli_types


def _valid_value(action) -> str:
    if action.type is None:
        from sparsekit.models import MODELS
        return next(iter(MODELS)) if action.dest == "model" else "x"
    for text in ("1", "0.5", "32", "x"):
        try:
            action.type(text)
            return text
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
    raise AssertionError(f"no valid value known for {action.option_strings}")


def _argv(words, sub, flag_action, bad: str) -> list[str]:
    """A command line that is valid but for ``flag_action``'s value ``bad``."""
    argv = [*words]
    for action in sub._actions:
        if action is flag_action or not action.option_strings or not action.required:
            continue
        argv += [action.option_strings[0], action.choices[0] if action.choices else _valid_value(action)]
    for group in sub._mutually_exclusive_groups:
        if group.required and flag_action not in group._group_actions:
            pick = next(a for a in group._group_actions if a.type is not None)     # (a typed one: no file read)
            argv += [pick.option_strings[0], _valid_value(pick)]
    return [*argv, flag_action.option_strings[0], bad]


TYPED_FLAGS = [(words, action.option_strings[0]) for words, _, action, _ in _typed_flags()]


@pytest.mark.parametrize("words, flag", TYPED_FLAGS, ids=[" ".join(w) + " " + f for w, f in TYPED_FLAGS])
def test_every_numeric_flag_refuses_bad_values_in_one_line(words, flag, capsys, tmp_path):
    words_, sub, action, _ = next(t for t in _typed_flags() if t[0] == words and t[2].option_strings[0] == flag)
    existing_file = tmp_path / "file"
    existing_file.write_text("")
    bads = [str(existing_file)] if action.type.__name__ == "out_folder" else ["-1", "nan", "x", "1e400"]
    for bad in bads:
        assert main(_argv(words_, sub, action, bad)) == 2, (flag, bad)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and flag in err and "Traceback" not in err, err


#: Integer flags that are no size, count or repeat: any non-negative seed is valid.
UNBOUNDED_INTEGER_FLAGS = {"--seed"}
SIZE_FLAGS = [(words, action.option_strings[0]) for words, _, action, _ in _typed_flags()
              if action.type.__name__ == "integer" and action.option_strings[0] not in UNBOUNDED_INTEGER_FLAGS]


@pytest.mark.parametrize("words, flag", SIZE_FLAGS, ids=[" ".join(w) + " " + f for w, f in SIZE_FLAGS])
def test_every_size_flag_refuses_a_huge_value_by_name(words, flag, capsys):
    """A size, count or repeat past what the command can run on one GPU is a usage error naming the flag and
    its upper bound, not a ``MemoryError`` or a run that never ends."""
    words_, sub, action, _ = next(t for t in _typed_flags() if t[0] == words and t[2].option_strings[0] == flag)
    for huge in (str(2**31), "1" + "0" * 30):
        assert main(_argv(words_, sub, action, huge)) == 2, (flag, huge)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"argument {flag}: " in err and "<= " in err and repr(huge) in err, err


def test_every_typed_flag_uses_a_shared_type():
    """Plain ``int``/``float`` types let -1 or NaN through to NumPy; ``--out`` must refuse an existing file."""
    for words, sub, action, cli_types in _typed_flags():
        assert action.type not in (int, float), f"{' '.join(words)} {action.option_strings[0]}: use cli_types"
    for words, sub in _subcommands(build_parser()):
        for action in sub._actions:
            if "--out" in action.option_strings:
                assert getattr(action.type, "__name__", "") == "out_folder", f"{' '.join(words)} --out"


# ---------------------------------------------------------------- the coverage guard

#: Modules whose public functions (``__all__``, else every public function defined there) are entry points.
GUARDED = ["sparsekit.formats", "sparsekit.prune", "sparsekit.io", "sparsekit.rnn_layout", "sparsekit.roofline",
           "sparsekit.api", "sparsekit.gpu.uspmm", "sparsekit.gpu.uspmm_tc", "sparsekit.gpu.uspmm_wgmma",
           "sparsekit.gpu.spmm", "sparsekit.gpu.spmm_tiled", "sparsekit.gpu.spmm_bitmap", "sparsekit.gpu.spmm_lessons",
           "sparsekit.gpu.sparsify24", "sparsekit.gpu.persistent_rnn", "sparsekit.gpu.device_ell"]

#: Modules with no entry point taking user data, each with the reason.
UNGUARDED_MODULES = {
    "sparsekit.gpu.cluster": "device functions and the cluster launch used by the wgmma split-K kernel",
    "sparsekit.gpu.inline": "inline PTX helpers (device functions)",
    "sparsekit.gpu.launch": "the launch contract used by the launchers (sizes from validated operands)",
    "sparsekit.gpu.spmm_ell_rows": "takes plain arrays (values, indices, K) that sparsekit.torch.SparseLinear builds; its "
                         "refusals of bad operands are in tests/test_spmm_ell_rows.py",
    "sparsekit.gpu.spmm_ell_compact": "compact ELL rows (values, offsets, bases, K); refusals: tests/test_spmm_ell_compact.py",
    "sparsekit.gpu.mma": "tensor-core device functions (their probes are in tests/mma_probes.py)",
    "sparsekit.gpu.wgmma": "wgmma device functions (the probe is in tests/mma_probes.py)",
    "sparsekit.gpu.sync_primitives": "device functions",
    "sparsekit.gpu.vector_loads": "device functions",
    "sparsekit.gpu.split_k": "device functions and buffers of the split-K reduction",
    "sparsekit.gpu.sparse24_cusparselt": "metadata re-layout of gpu.sparsify24's validated output",
    "sparsekit.checks": "the checks themselves, reached through every entry point here",
    "sparsekit.arrays": "the operand helper every launcher validates through (tests/test_arrays.py)",
    "sparsekit.commands": "the CLI's commands, covered through the parser",
    "sparsekit.bench": "benchmarks of generated problems whose sizes come from the CLI's parsed flags (covered "
                       "through the parser) or from experiments",
    "sparsekit.launch": "replays launches recorded from a validated product (no operand of its own)",
    "sparsekit.torch": "the optional torch layer; its refusals (pattern, dtype, width, sparsity, columns, "
                       "bare Linear) are in tests/test_torch_layer.py",
    "sparsekit.cli": "covered through the parser: test_every_numeric_flag_refuses_bad_values_in_one_line",
    "sparsekit.cli_types": "covered through the parser",
    "sparsekit.testsuite": "runs the suite",
    "sparsekit.backend": "device detection, no user data",
    "sparsekit.device": "device facts, no user data",
    "sparsekit.timing": "timing of launches built from validated operands",
    "sparsekit.numba_patches": "replacements of numba-cuda internals, installed by install_all(); no user data",
    "sparsekit.numba_compat": "numba-cuda internals for compiled kernels, no user data",
    "sparsekit.simulator": "the CUDA simulator's scheduling",
    "sparsekit.tune": "the cache rows (tune cache) and the launchers' config='auto' cover it",
    "sparsekit.tune_cache": "the cache rows (tune cache) and the launchers' config='auto' cover it",
    "sparsekit.router": "rules over problem sizes, no user data (tests/test_tune_routes.py)",
    "sparsekit.experiment": "experiment records and tables",
    "sparsekit.models": "layer shape tables",
    "sparsekit.offline": "offline compile helpers",
    "sparsekit.specialize": "teaching track code generator, its own tests",
    "sparsekit.sorting_networks": "network generators, their own tests",
    "sparsekit.loop_orders": "teaching track CPU kernels, their own tests",
    "sparsekit.balance": "teaching track measures, their own tests",
    "sparsekit.train": "training loops over validated pruners",
    "sparsekit.sparse24_training": "training loops over gpu.sparsify24",
}

#: Public names of guarded modules that are no entry point for user data, each with the reason.
NOT_ENTRY_POINTS = {
    "formats.NBytes": "a result tuple",
    "rnn_layout.Split": "a result record", "rnn_layout.ConflictReport": "a result record",
    "roofline.default_unit": "names of the cost model's own units",
    "gpu.uspmm.DeviceELL": "built by gpu.device_ell.prepare (covered)",
    "gpu.uspmm.prepare": "gpu.device_ell.prepare re-exported",
    "gpu.uspmm.split_ticket": "device function", "gpu.uspmm.split_sum": "device function",
    "gpu.uspmm_tc.run": "runs a prepared DeviceELL and operand (uspmm_tc.uspmm covered)",
    "gpu.uspmm_tc.shared_bytes": "sizes of its own tunables", "gpu.uspmm_tc.segment_entries": "of a DeviceELL",
    "gpu.uspmm_tc.error_reduction": "a bound of sizes",
    "gpu.uspmm_wgmma.run": "runs a prepared DeviceELL and operand (uspmm_wgmma.uspmm covered)",
    "gpu.uspmm_wgmma.auto_precision": "of a DeviceELL", "gpu.uspmm_wgmma.shared_bytes": "sizes of its own tunables",
    "gpu.uspmm_wgmma.supported": "no argument",
    "gpu.spmm.DeviceSparse": "built by gpu.spmm.prepare", "gpu.spmm.staged_tunables": "of a validated CSR and N",
    "gpu.spmm.auto_route": "of a prepared CSR and N (as staged_tunables)",
    "gpu.spmm_tiled.DeviceTiled": "built by gpu.spmm_tiled.prepare",
    "gpu.spmm_tiled.shared_bytes": "sizes", "gpu.spmm_tiled.padded_n": "a size",
    "gpu.spmm_bitmap.DeviceBitmap": "built by gpu.spmm_bitmap.prepare", "gpu.spmm_bitmap.default_config": "sizes",
    "gpu.spmm_bitmap.check_block": "sizes (its refusals: tests/test_tune_bitmap.py, through the launcher)",
    "formats.TiledBitmap.column": "the layout's column map: positions in, positions out",
    "gpu.spmm_lessons.DeviceCSR": "built by gpu.spmm_lessons.prepare",
    "gpu.spmm_lessons.tile_csc": "of a validated CSR (the smem_tiled lesson, covered)",
    "gpu.sparsify24.kernel_for": "compile-time choices", "gpu.sparsify24.auto_min_blocks": "compile-time choices",
    "gpu.sparsify24.tile_mask_source": "code generator",
    "gpu.persistent_rnn.step_stride": "sizes", "gpu.persistent_rnn.shared_bytes": "sizes",
    "gpu.persistent_rnn.max_hidden": "sizes", "gpu.persistent_rnn.shared_limit": "no argument",
    "gpu.device_ell.DeviceELL": "built by gpu.device_ell.prepare (covered)",
    "gpu.device_ell.rhs": "the operand check of the USpMM launchers (covered through them)",
}

#: Entry points reached through a case of another name (a method of a covered class, a re-export).
REACHED_THROUGH = {
    "gpu.spmm.prepare": "gpu.spmm.spmm_csr", "gpu.spmm.as_csr": "gpu.spmm.spmm_coo",
    "gpu.spmm_tiled.prepare": "gpu.spmm_tiled.spmm_tiled",
    "gpu.spmm_bitmap.prepare": "gpu.spmm_bitmap.spmm_bitmap",
    "gpu.spmm_lessons.prepare": "gpu.spmm_lessons.thread_per_row", "gpu.device_ell.prepare": "gpu.uspmm.uspmm",
}


def _short(module: str) -> str:
    return module.removeprefix("sparsekit.")


def _public_callables(module_name: str) -> set[str]:
    mod = importlib.import_module(module_name)
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n, f in vars(mod).items() if not n.startswith("_") and inspect.isfunction(f)
                 and f.__module__ == module_name]
    return {f"{_short(module_name)}.{n}" for n in names if callable(getattr(mod, n))}


def test_every_public_entry_point_is_in_the_matrix():
    covered = {c.entry for c in _all_cases(Path("/nonexistent"), None)}
    covered |= set(REACHED_THROUGH)
    # a format class counts when its conversions and from_dense are in the matrix (private bases such as
    # _HalfFormat are not entry points: their methods are checked through the classes that inherit them)
    format_classes = {n for n, c in vars(formats).items() if isinstance(c, type) and issubclass(c, formats._Format)
                      and not n.startswith("_")}
    covered |= {f"formats.{name}" for name in format_classes}
    methods = {f"formats.{name}.{m}" for name in format_classes for m in dir(getattr(formats, name))
               if not m.startswith("_") and callable(getattr(getattr(formats, name), m))}
    public = set().union(*(_public_callables(m) for m in GUARDED)) | methods
    missing = sorted(public - covered - set(NOT_ENTRY_POINTS))
    assert not missing, f"public entry points without a bad-input case (see this module's docstring): {missing}"
    stale = sorted(set(NOT_ENTRY_POINTS) - public)
    assert not stale, f"NOT_ENTRY_POINTS names that no longer exist: {stale}"


def test_every_module_is_guarded_or_says_why_not():
    kernel_packages = {"sparsekit.gpu", "sparsekit.cpu", "sparsekit.reference"}   # gpu's modules are listed one by one
    found = {f"{pkg}.{m.name}" for pkg in ("sparsekit.gpu", "sparsekit")
             for m in pkgutil.iter_modules([str(ROOT.joinpath(*pkg.split(".")))]) if not m.name.startswith("_")}
    found -= kernel_packages
    unclassified = sorted(found - set(GUARDED) - set(UNGUARDED_MODULES))
    assert not unclassified, f"modules in neither GUARDED nor UNGUARDED_MODULES: {unclassified}"
