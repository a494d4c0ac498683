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
public functions) and every sparse format class must be named by a case
(``Case.entry``) or listed in ``NOT_ENTRY_POINTS`` with the reason; every
module under ``gpu/`` and ``sparsekit/`` must be in ``GUARDED`` or in
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
3. a sparse format class: one line in ``FROM_DENSE`` (its weight classes),
   one in ``BUILD`` and ``INDEX_NAME`` (its stored-index classes through every
   conversion; a format whose indices are not a column-like array gets its
   own edits, as ``TILED_EDITS`` does for ``TiledCSL``);
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
import importlib
import inspect
import json
import pkgutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import scipy.sparse as sp
from numba.cuda import config

from sparsekit import formats, io, prune, roofline, rnn_layout
from sparsekit.cli import build_parser, main
from tests.spmm_close import assert_spmm_close

ROOT = Path(__file__).resolve().parents[1]

GOOD = np.arange(1, 65, dtype=np.float32).reshape(8, 8) * np.where(np.arange(64) % 3, 1, -1).reshape(8, 8)


# ---------------------------------------------------------------- the cases

@dataclass(frozen=True)
class Case:
    """One call of ``entry`` with input of class ``bad``: it raises ``exc`` whose message holds ``text``, or
    (``exc`` None) returns having asserted its own result."""

    entry: str
    bad: str
    call: Callable[[], object]
    exc: type | None = None
    text: str = ""
    xfail: str = ""             #: a known gap, named; strict, so fixing it makes the case fail until this goes

    @property
    def id(self) -> str:
        return f"{self.entry}-{self.bad}"


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
# TiledCSL holds half-precision values only: its weight classes differ (float32 is a dtype error there).
HALF = GOOD.astype(np.float16)


def _weight_cases() -> list[Case]:
    cases = []
    for entry, (call, argname) in WEIGHT_TAKERS.items():
        for bad, (transform, exc, text) in WEIGHT_CLASSES.items():
            cases.append(Case(entry, bad, lambda c=call, t=transform: c(t(GOOD)), exc, f"{argname}|{text}"))
    tiled = {"not_2d": (HALF.reshape(-1), ValueError, "dense: expected a 2-D"),
             "float32": (GOOD, TypeError, "dense"), "nan": (_nan(HALF), ValueError, "dense: must be finite"),
             "inf": (_inf(HALF), ValueError, "dense: must be finite"), "not_array": (HALF.tolist(), TypeError, "dense")}
    for bad, (w, exc, text) in tiled.items():
        cases.append(Case("formats.TiledCSL.from_dense", bad, lambda w=w: formats.TiledCSL.from_dense(w, tile=(4, 4)),
                          exc, text))
    return cases


# ------------------------------------------------- stored indices of every format

SPARSE = GOOD * (np.arange(64).reshape(8, 8) % 2)        # half the entries, 4 a row
BUILD = {
    "CSR": lambda: formats.CSR.from_dense(SPARSE),
    "COO": lambda: formats.COO.from_dense(SPARSE),
    "ELL": lambda: formats.ELL.from_dense(SPARSE),
    "BlockedELL": lambda: formats.BlockedELL.from_dense(SPARSE, block=2),
    "NM": lambda: formats.NM.from_dense(_two_of_four(GOOD), n=2, m=4),
    "BSR": lambda: formats.BSR.from_dense(SPARSE, blocksize=(2, 2)),
}
#: Array a message names for each format's column-like index array.
INDEX_NAME = {"CSR": "indices", "COO": "col", "ELL": "indices", "BlockedELL": "indices", "NM": "positions",
              "BSR": "indices"}


def _at(a: np.ndarray, j: int) -> tuple:
    """Position of the ``j``-th stored index of the first row (1-D: ``j``; 2-D: row 0, slot ``j``)."""
    return (0,) * (a.ndim - 1) + (j,)


def _negative(a):
    a[_at(a, 0)] = -1


def _past_the_end(a):
    a[_at(a, 0)] = 100


def _unsorted(a):
    a[_at(a, 0)], a[_at(a, 1)] = a[_at(a, 1)], a[_at(a, 0)]


def _duplicate(a):
    a[_at(a, 1)] = a[_at(a, 0)]


INDEX_CLASSES = {"negative_index": (_negative, "must lie in"), "index_past_the_end": (_past_the_end, "must lie in"),
                 "unsorted_index": (_unsorted, "sorted"), "duplicate_index": (_duplicate, "sorted")}


def _corrupted(fmt: str, corrupt):
    """A valid matrix whose column-like index array was edited afterwards (arrays stay writable)."""
    x = BUILD[fmt]()
    corrupt(x._index_arrays()[-1])
    return x


def _conversions(x) -> list[str]:
    return [name for name in ("to_dense", "mask", "to_csr", "to_scipy") if hasattr(x, name)]


def _tiled(edit=None):
    t = formats.TiledCSL.from_dense((SPARSE / 8).astype(np.float16), tile=(4, 4))
    if edit is not None:
        edit(t)
    return t


TILED_EDITS = {   # class -> (edit, text): the words hold a local index in their high half
    "index_past_the_end": (lambda t: t.words.__setitem__(0, np.uint32(t.sink + 1) << np.uint32(16)),
                           "words: local index 17 exceeds"),
    "duplicate_index": (lambda t: t.words.__setitem__(1, t.words[0]), "words: local indices should ascend"),
    "negative_index": (lambda t: t.offsets.__setitem__(1, -4), "offsets: should ascend"),
    "unsorted_index": (lambda t: t.offsets.__setitem__(1, 3), "offsets: should ascend in multiples of 4"),
}


def _index_cases() -> list[Case]:
    cases = []
    for fmt in BUILD:
        for bad, (corrupt, rule) in INDEX_CLASSES.items():
            if bad == "negative_index" and BUILD[fmt]()._index_arrays()[-1].dtype.kind == "u":
                continue        # (NM's uint8 positions cannot hold -1)
            for conv in _conversions(BUILD[fmt]()):
                cases.append(Case(f"formats.{fmt}.{conv}", bad,
                                  lambda f=fmt, c=corrupt, v=conv: getattr(_corrupted(f, c), v)(),
                                  ValueError, f"{INDEX_NAME[fmt]}|{rule}"))
    for bad, (edit, text) in TILED_EDITS.items():
        for conv in ("to_dense", "mask", "to_csr"):
            cases.append(Case(f"formats.TiledCSL.{conv}", bad, lambda e=edit, v=conv: getattr(_tiled(e), v)(),
                              ValueError, text))
    # a shape past what the index dtype can address, and one past 32-bit indexing
    cases.append(Case("formats.CSR", "int32_overflowing_shape",
                      lambda: formats.CSR(np.array([0, 1], np.int32), np.array([0], np.int32),
                                          np.ones(1, np.float32), (1, 2**31 + 5)), ValueError, "indices"))
    cases.append(Case("formats.ELL.from_dense", "int16_overflowing_shape",
                      lambda: formats.ELL.from_dense(np.ones((1, 40000), np.float32), index_dtype=np.int16),
                      ValueError, "index_dtype"))
    for fmt in ("CSR", "COO", "BSR"):
        from_scipy = getattr(formats, fmt).from_scipy
        nan = sp.csr_matrix(np.array([[np.nan, 1.0]], np.float32))
        big = sp.csr_matrix(np.array([[7e4, 1.0]], np.float32))
        cases += [Case(f"formats.{fmt}.from_scipy", "nan", lambda f=from_scipy: f(nan), ValueError, "a: |finite"),
                  Case(f"formats.{fmt}.from_scipy", "overflowing_cast",
                       lambda f=from_scipy: f(big, dtype=np.float16), ValueError, "a: |overflows float16"),
                  Case(f"formats.{fmt}.from_scipy", "not_scipy", lambda f=from_scipy: f(GOOD), TypeError,
                       "a: expected a scipy.sparse")]
    cases.append(Case("formats.convert", "not_a_format", lambda: formats.convert(GOOD, formats.CSR), TypeError,
                      "x"))
    return cases


# ---------------------------------------------------------------- GPU launchers

def _launchers():
    """entry -> (call(a, b), good matrix, good operand, operand name, contracted axis of the operand)."""
    from gpu import spmm, spmm_lessons, spmm_tiled, uspmm, uspmm_tc, uspmm_wgmma
    from sparsekit.api import spmm as api_spmm

    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 16)).astype(np.float32)
    wu = w * prune.uniform(w, 0.5)
    ell, csr = formats.ELL.from_dense(wu), formats.CSR.from_dense(wu)
    coo = formats.COO.from_dense(wu)
    bell = formats.BlockedELL.from_dense(w * prune.blocked_uniform(w, 0.5, 4), block=4)
    tiled = formats.TiledCSL.from_dense(wu.astype(np.float16), tile=(16, 16))
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
        if entry.startswith("gpu.spmm_tiled"):       # N from 1 to 64 by design, said so
            cases.append(Case(entry, "empty", lambda c=call, a=a, e=empty: c(a, e), ValueError, f"{name}: "))
        else:
            cases.append(Case(entry, "empty", lambda c=call, a=a, e=empty, ax=axis: _check_product(c, a, e, ax)))
        cases.append(Case(entry, "dense_matrix", lambda c=call, a=a, b=b: c(a.to_dense(), b), TypeError,
                          "expected"))
        if isinstance(a, formats.TiledCSL):
            if not config.ENABLE_CUDASIM:
                continue        # the gap below reads out of bounds on a GPU, which can end the CUDA context
            edit, text = TILED_EDITS["negative_index"]
            cases.append(Case(entry, "negative_index", lambda c=call, b=b, e=edit: c(_tiled_like(a, e), b),
                              ValueError, text, xfail="gpu.spmm_tiled.prepare does not scan the words and offsets "
                                                      "(a simulated thread reads out of bounds)"))
        else:
            cases.append(Case(entry, "negative_index",
                              lambda c=call, a=a, b=b: c(_edited(a, _negative), b), ValueError, "must lie in"))
    return cases


def _valid_input_cases() -> list[Case]:
    """Valid calls that must not be refused: each USpMM variant with its own default tunables."""
    call, ell, b, _, axis = _launchers()["gpu.uspmm.uspmm"]
    return [Case("gpu.uspmm.uspmm", f"variant_{variant}_defaults",
                 lambda v=variant: _check_product(lambda a, x: call(a, x, variant=v), ell, b, axis),
                 xfail=("its defaults ask for more than the 48 KB of static shared memory at every size"
                        if variant in ("pipelined", "dense_tile") else ""))
            for variant in ("listing1", "tiled", "pipelined", "direct", "dense_tile", "warp_split")]


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
    from gpu import sparsify24

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
    from gpu.persistent_rnn import PersistentRNN, lstm_forward, rnn_forward

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


def _io_cases(tmp: Path) -> list[Case]:
    bad_csr = formats.CSR(np.array([0, 1, 1], np.int32), np.array([5], np.int32), np.ones(1, np.float32), (2, 3))
    files = {   # class -> (reader, file name, text, message)
        "empty_file": ("read_smtx", "e.smtx", "", "e.smtx"),
        "corrupt_header": ("read_smtx", "h.smtx", "2 4 3\n0 2 3\n3 1 0\n", "line 1"),
        "index_past_the_end": ("read_smtx", "i.smtx", "2, 4, 3\n0 2 3\n3 4 0\n", "must lie in [0, 4)"),
        "duplicate_index": ("read_smtx", "d.smtx", "2, 4, 3\n0 2 3\n1 1 0\n", "repeats a column"),
        "huge_count": ("read_smtx", "c.smtx", "12345678901234567890, 4, 0\n0\n\n", "rows"),
        "mtx_nan": ("read_mtx", "n.mtx", "%%MatrixMarket matrix coordinate real general\n2 3 1\n2 3 nan\n",
                    "finite"),
        "mtx_no_banner": ("read_mtx", "g.mtx", "garbage\n", "g.mtx: not a readable"),
        "mtx_huge_header": ("read_mtx", "b.mtx",
                            "%%MatrixMarket matrix coordinate real general\n1000000000000 3 1\n1 1 1.0\n", "rows"),
        "mtx_truncated": ("read_mtx", "t.mtx", "%%MatrixMarket matrix coordinate real general\n2 3 2\n1 1 1.0\n",
                          "t.mtx"),
        "unknown_suffix": ("read_matrix", "a.txt", "1, 1, 0\n0 0\n\n", ".smtx or .mtx"),
    }
    cases = [Case(f"io.{reader}", bad, lambda r=reader, n=name, t=text: getattr(io, r)(_write(tmp, n, t)),
                  ValueError, msg) for bad, (reader, name, text, msg) in files.items()]
    for writer in ("write_smtx", "write_mtx"):
        cases += [Case(f"io.{writer}", "not_a_format", lambda w=writer: getattr(io, w)(tmp / "o", GOOD), TypeError,
                       "csr: expected"),
                  Case(f"io.{writer}", "index_past_the_end", lambda w=writer: getattr(io, w)(tmp / "o", bad_csr),
                       ValueError, "indices: indices must lie in [0, 3)")]
    cases.append(Case("io.seeded_values", "int_dtype", lambda: io.seeded_values(3, dtype=np.int32), TypeError,
                      "dtype"))
    cases.append(Case("io.seeded_values", "negative", lambda: io.seeded_values(-1), ValueError, "nnz"))
    return cases


def _auto_with_cache(tmp: Path, text: str, monkeypatch):
    """``uspmm(config="auto")`` with ``text`` at the cache path: the right product and one warning."""
    from gpu import uspmm
    from sparsekit import tune

    w = (GOOD * prune.uniform(GOOD, 0.5)).astype(np.float32)
    b = np.linspace(-1, 1, 8 * 3, dtype=np.float32).reshape(8, 3)
    key = tune.problem_key("test-gpu", 8, 8, 3, 4, np.float32, np.int32, "C")     # this very problem's entry
    path = _write(tmp, "uspmm.json", text.replace("KEY", key))
    monkeypatch.setenv("SPARSEKIT_TUNE_CACHE", str(path))
    monkeypatch.setattr(tune, "_device_name", lambda: "test-gpu")
    monkeypatch.setattr(tune, "_LOADED", {})
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
        Case("roofline.sol_of", "not_counts", lambda: r.sol_of("x"), TypeError, "c: ",
             xfail="sol_of does not check its Counts argument (AttributeError)"),
        Case("roofline.compare", "not_sol", lambda: r.compare(1, 2, 3, 4), TypeError, "dense: ",
             xfail="compare does not check its SoL arguments (AttributeError)"),
    ]


# ---------------------------------------------------------------- the matrix test

def _all_cases(tmp: Path, monkeypatch) -> list[Case]:
    """Every case; ``tmp`` is where file and cache cases write (nothing is written until a case runs)."""
    return (_weight_cases() + _index_cases() + _launcher_cases() + _valid_input_cases() + _sparsify24_cases()
            + _rnn_cases() + _io_cases(tmp) + _cache_cases(tmp, monkeypatch) + _roofline_cases())


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> dict[str, Case]:
    patch = pytest.MonkeyPatch()
    yield {c.id: c for c in _all_cases(tmp_path_factory.mktemp("bad"), patch)}
    patch.undo()


def _case_ids() -> list[str]:
    """The ids, known at collection (the calls run inside the test)."""
    ids = [c.id for c in _all_cases(Path("/nonexistent"), None)]
    assert len(ids) == len(set(ids)), "two cases share an id"
    return ids


@pytest.mark.parametrize("case_id", _case_ids())
def test_bad_input_is_refused_by_name_or_answered_correctly(cases, case_id, request):
    case = cases[case_id]
    if case.xfail:
        request.applymarker(pytest.mark.xfail(reason=case.xfail, strict=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=Warning)   # (the simulator's occupancy warnings)
        if case.exc is None:
            case.call()
            return
        with pytest.raises((TypeError, ValueError)) as info:
            case.call()
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
           "sparsekit.api", "gpu.uspmm", "gpu.uspmm_tc", "gpu.uspmm_wgmma", "gpu.spmm", "gpu.spmm_tiled",
           "gpu.spmm_lessons", "gpu.sparsify24", "gpu.persistent_rnn", "gpu.device_ell"]

#: Modules with no entry point taking user data, each with the reason.
UNGUARDED_MODULES = {
    "gpu.cluster": "device functions and the cluster launch used by the persistent RNN",
    "gpu.inline": "inline PTX helpers (device functions)",
    "gpu.launch": "the launch contract used by the launchers (sizes from validated operands)",
    "gpu.mma": "tensor-core device functions and their probes",
    "gpu.wgmma": "wgmma device functions and their probes",
    "gpu.sync_primitives": "device functions",
    "gpu.vector_loads": "device functions",
    "gpu.split_k": "device functions and buffers of the split-K reduction",
    "gpu.sparse24_cusparselt": "metadata re-layout of gpu.sparsify24's validated output",
    "sparsekit.checks": "the checks themselves, reached through every entry point here",
    "sparsekit.arrays": "the operand helper every launcher validates through (tests/test_arrays.py)",
    "sparsekit.commands": "the CLI's commands, covered through the parser",
    "sparsekit.cli": "covered through the parser: test_every_numeric_flag_refuses_bad_values_in_one_line",
    "sparsekit.cli_types": "covered through the parser",
    "sparsekit.testsuite": "runs the suite",
    "sparsekit.backend": "device detection, no user data",
    "sparsekit.device": "device facts, no user data",
    "sparsekit.timing": "timing of launches built from validated operands",
    "sparsekit.numba_patches": "Numba fixes applied at import",
    "sparsekit.simulator": "the CUDA simulator's scheduling",
    "sparsekit.tune": "the cache rows (tune cache) and the launchers' config='auto' cover it",
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
    "prune.gradual_schedule": "a schedule of sparsities, tests/test_prune.py",
    "prune.halving_schedule": "a schedule of sparsities, tests/test_prune.py",
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
    "gpu.spmm_tiled.DeviceTiled": "built by gpu.spmm_tiled.prepare",
    "gpu.spmm_tiled.shared_bytes": "sizes", "gpu.spmm_tiled.padded_n": "a size",
    "gpu.spmm_lessons.DeviceCSR": "built by gpu.spmm_lessons.prepare",
    "gpu.spmm_lessons.tile_csc": "of a validated CSR (the smem_tiled lesson, covered)",
    "gpu.sparsify24.kernel_for": "compile-time choices", "gpu.sparsify24.auto_min_blocks": "compile-time choices",
    "gpu.sparsify24.tile_mask_source": "code generator",
    "gpu.persistent_rnn.step_stride": "sizes", "gpu.persistent_rnn.shared_bytes": "sizes",
    "gpu.persistent_rnn.max_hidden": "sizes", "gpu.persistent_rnn.shared_limit": "no argument",
    "gpu.persistent_rnn.part_columns": "sizes", "gpu.persistent_rnn.pass_bounds": "of a validated RNNLayout",
    "gpu.persistent_rnn.pass_pairs": "of a validated RNNLayout",
    "gpu.device_ell.DeviceELL": "built by gpu.device_ell.prepare (covered)",
    "gpu.device_ell.rhs": "the operand check of the USpMM launchers (covered through them)",
}

#: Entry points reached through a case of another name (a method of a covered class, a re-export).
REACHED_THROUGH = {
    "gpu.spmm.prepare": "gpu.spmm.spmm_csr", "gpu.spmm_tiled.prepare": "gpu.spmm_tiled.spmm_tiled",
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
    # a format class counts when its conversions and from_dense are in the matrix
    format_classes = {n for n, c in vars(formats).items() if isinstance(c, type) and issubclass(c, formats._Format)
                      and c is not formats._Format}
    for name in format_classes:
        assert {f"formats.{name}.to_dense", f"formats.{name}.mask", f"formats.{name}.from_dense"} <= covered, name
    covered |= {f"formats.{name}" for name in format_classes}
    public = set().union(*(_public_callables(m) for m in GUARDED))
    missing = sorted(public - covered - set(NOT_ENTRY_POINTS))
    assert not missing, f"public entry points without a bad-input case (see this module's docstring): {missing}"
    stale = sorted(set(NOT_ENTRY_POINTS) - public)
    assert not stale, f"NOT_ENTRY_POINTS names that no longer exist: {stale}"


def test_every_module_is_guarded_or_says_why_not():
    found = {f"{pkg}.{m.name}" for pkg in ("gpu", "sparsekit")
             for m in pkgutil.iter_modules([str(ROOT / pkg)]) if not m.name.startswith("_")}
    unclassified = sorted(found - set(GUARDED) - set(UNGUARDED_MODULES))
    assert not unclassified, f"modules in neither GUARDED nor UNGUARDED_MODULES: {unclassified}"
