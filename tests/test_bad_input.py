"""Bad input matrix: every public entry point against every class of bad input.

Each row of the matrix is (entry point, a callable taking a weight-like first
argument, the classes that apply). Each class is a transformation of a good
input that must raise ``TypeError`` or ``ValueError`` whose message names the
argument. A coverage test fails when a public function is added to
``sparsekit.prune`` or a format gains a ``from_dense`` without a row here.
The modules' own tests check the exact rules; this one checks that no entry
point forgets a class. Sparsity outside [0, 1) is covered for every pruner by
``tests/test_prune.py::test_bad_sparsity`` and not repeated here.
"""
from __future__ import annotations

import numpy as np
import pytest

from sparsekit import formats, prune

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


def test_matrix_covers_every_public_function():
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
