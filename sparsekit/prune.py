"""Pruners: each returns a boolean mask (``True`` = keep) of the weight's shape.

No pruner modifies, copies into or casts the weight it is given; apply a mask
with ``np.where(mask, w, 0)``. Conv weights ``(K, C, R, S)`` are pruned as the
``K x CRS`` matrix of :func:`sparsekit.checks.as_2d` and the mask is reshaped
back, so "row" below means an output channel.

Counting rule (every pruner). A target sparsity ``s`` over ``n`` candidates
keeps the integer nearest to ``(1 - s) * n``; a half is rounded down, i.e.
towards the higher sparsity (``n=3, s=0.5`` keeps 1). The achieved sparsity is
therefore within half a candidate of the target, where a candidate is an entry
(:func:`magnitude`), an entry per row (:func:`row_balanced`, :func:`uniform`),
a block (:func:`block`) or a block per block-row (:func:`blocked_uniform`).
Counts are counts of mask positions: where the target keeps more entries than
the weight has nonzeros, zeros are kept (uniform rows must stay equally long).

Ties (every pruner) are broken deterministically by a stable sort on the
descending score: among equal magnitudes (or norms) the lower index wins, i.e.
the lower column within a row or group, the lower row-major position within a
matrix, and, for the global pruners, the earlier layer in the dict's order.
Scores are compared in float64 (exact for every accepted weight dtype).

Uniform sparsity ("Uniform Sparsity in Deep Neural Networks", Section 2.2):
sort every row by ``|w|`` descending, aggregate each column of that sorted
matrix by its l2 norm, remove the columns whose norm falls below a threshold
(keeping ``K'`` columns), and scatter the first ``K'`` values of every row back
to their original places. Because every sorted row is non-increasing, the
column norms are non-increasing too, so any threshold keeps a prefix of
columns. For one layer the threshold therefore only fixes ``K'`` from the
target, ``K' = nearest((1 - s) * K)``, and :func:`uniform` equals
:func:`row_balanced`; the aggregation matters when ONE threshold spans a whole
network (:func:`uniform_global`, the paper's setting) or blocks
(:func:`blocked_uniform`).

Schedules: :func:`gradual_schedule` is the cubic ramp of Zhu & Gupta (2017),
:func:`halving_schedule` the 50 -> 75 -> 87.5 -> 93.75 -> 96.875 % steps of
"The Sparsity Roofline" (Section 4: sparsity raised by ``(1 - S) / 2`` per round).
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from sparsekit.checks import (as_2d, check_divisible, check_int, check_sparsity,
                              check_weight)

__all__ = ["magnitude", "magnitude_global", "uniform", "uniform_global", "row_balanced",
           "blocked_uniform", "n_m", "block", "gradual_schedule", "halving_schedule"]


# -- shared steps ------------------------------------------------------------

def _weight_2d(w, name: str) -> tuple[np.ndarray, tuple[int, ...]]:
    """Validate a weight (2-D or 4-D conv, float, finite, non-empty); return its 2-D view."""
    check_weight(w, name)
    if w.size == 0:
        raise ValueError(f"{name}: must hold at least one element, got shape {w.shape}")
    return as_2d(w)


def _weights_2d(weights) -> tuple[list, list[np.ndarray], list[tuple[int, ...]]]:
    """Validate a model ``{name: weight}``; return names, 2-D views and original shapes."""
    if not isinstance(weights, Mapping):
        raise TypeError(f"weights: expected a dict of name -> weight, got {type(weights).__name__}")
    if not weights:
        raise ValueError("weights: must hold at least one layer, got an empty dict")
    names = list(weights)
    views, shapes = zip(*(_weight_2d(weights[k], f"weights[{k!r}]") for k in names))
    return names, list(views), list(shapes)


def _scores(a: np.ndarray) -> np.ndarray:
    """|a| in float64: exact for every accepted dtype, one dtype for mixed models."""
    return np.abs(a.astype(np.float64))


def _nearest(target: float) -> int:
    """The integer nearest to ``target >= 0``, halves rounded down (higher sparsity)."""
    return int(math.ceil(target - 0.5))


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Mask keeping the ``k`` largest scores along the last axis; ties: lower index wins. The ``k``-th largest
    score from a partition (linear time, where a sort of a 14336 x 4096 weight takes seconds): every larger
    score is kept, and of those equal to it the first ones in index order (scores are finite)."""
    n = scores.shape[-1]
    if k <= 0 or n == 0:
        return np.zeros(scores.shape, dtype=bool)
    if k >= n:
        return np.ones(scores.shape, dtype=bool)
    flat = scores.reshape(-1, n)
    kth = np.partition(flat, n - k, axis=-1)[:, n - k:n - k + 1]
    keep = flat > kth
    wanted = k - keep.sum(axis=-1)                               # ties to keep a row, lowest indices first
    rows, cols = np.nonzero(flat == kth)                         # row by row, columns ascending
    first = np.searchsorted(rows, np.arange(flat.shape[0]))
    kept = np.arange(rows.size) - first[rows] < wanted[rows]
    keep[rows[kept], cols[kept]] = True
    return keep.reshape(scores.shape)


def _uniform_kprimes(scores: list[np.ndarray], sparsity: float) -> list[int]:
    """The uniform pruner's K' per layer from ONE threshold on aggregated column values.

    Paper steps: sort every row of each layer by score descending, take the l2
    norm of each column of the sorted matrix. To compare layers of different
    heights the norm is divided by ``sqrt(rows)``: the aggregate is the RMS of
    the column, an average magnitude independent of the layer's row count M.
    A column of layer L stands for M_L kept entries. Candidate columns of all
    layers are ranked by RMS descending (ties: earlier layer, then lower
    column); keeping the first p of them is the threshold "RMS >= that of the
    p-th column". p is chosen so the kept count sum(M_L * K'_L) is nearest to
    ``(1 - sparsity) * total`` (ties: the smaller count). RMS is non-increasing
    along a layer's sorted columns, so each layer keeps a prefix of K'_L columns.
    """
    rms = []
    for s in scores:
        ordered = -np.sort(-s, axis=1)                              # rows sorted by |w| descending
        rms.append(np.sqrt(np.sum(ordered * ordered, axis=0) / s.shape[0]))  # column l2 / sqrt(M)
    layer = np.concatenate([np.full(r.size, i) for i, r in enumerate(rms)])
    rows = np.concatenate([np.full(r.size, s.shape[0]) for r, s in zip(rms, scores)])
    rank = np.argsort(-np.concatenate(rms), kind="stable")          # one global ranking of columns
    kept = np.concatenate(([0], np.cumsum(rows[rank])))             # kept entries for each prefix p
    total = sum(s.size for s in scores)
    p = int(np.argmin(np.abs(kept - (1.0 - sparsity) * total)))     # first minimum: fewer kept on ties
    return np.bincount(layer[rank[:p]], minlength=len(scores)).tolist()


def _block_norms(a: np.ndarray, br: int, bc: int) -> np.ndarray:
    """l2 norm of every (br, bc) block of ``a`` (shape divisible), in float64."""
    m, k = a.shape
    s = _scores(a).reshape(m // br, br, k // bc, bc)
    return np.sqrt(np.sum(s * s, axis=(1, 3)))


def _expand(keep: np.ndarray, br: int, bc: int) -> np.ndarray:
    """Blow a block mask up to entries."""
    return np.repeat(np.repeat(keep, br, axis=0), bc, axis=1)


# -- unstructured --------------------------------------------------------------

def magnitude(w: np.ndarray, sparsity: float) -> np.ndarray:
    """Unstructured magnitude pruning of one layer.

    Keeps the ``nearest((1 - sparsity) * w.size)`` entries of largest ``|w|``;
    ties: the lower row-major position wins.

    >>> magnitude(np.array([[1.0, -3.0], [2.0, 0.5]]), 0.5)
    array([[False,  True],
           [ True, False]])
    """
    a, shape = _weight_2d(w, "w")
    s = check_sparsity(sparsity)
    keep = _top(_scores(a).ravel(), _nearest((1.0 - s) * a.size))
    return keep.reshape(shape)


def magnitude_global(weights: Mapping, sparsity: float) -> dict:
    """Global magnitude pruning (GMP): one threshold on ``|w|`` over every layer.

    Keeps the ``nearest((1 - sparsity) * total)`` largest magnitudes of the
    whole model; ties: earlier layer in dict order, then lower row-major
    position. Returns ``{name: mask}`` in the dict's order.
    """
    names, views, shapes = _weights_2d(weights)
    s = check_sparsity(sparsity)
    flat = np.concatenate([_scores(a).ravel() for a in views])
    keep = _top(flat, _nearest((1.0 - s) * flat.size))
    ends = np.cumsum([a.size for a in views])
    return {n: part.reshape(shape)
            for n, part, shape in zip(names, np.split(keep, ends[:-1]), shapes)}


# -- uniform and row-balanced --------------------------------------------------

def uniform(w: np.ndarray, sparsity: float) -> np.ndarray:
    """Uniform sparsity for one layer: every row keeps the same K' entries.

    The paper's algorithm (sort rows, column l2 norms, threshold, scatter) on
    a single layer; ``K' = nearest((1 - sparsity) * K)`` and every row keeps its
    K' largest ``|w|`` (ties: lower column wins). See the module docstring for
    why this equals :func:`row_balanced` on one layer.

    >>> uniform(np.array([[4.0, 1.0, 3.0, 2.0], [1.0, 2.0, 3.0, 4.0]]), 0.5).astype(int)
    array([[1, 0, 1, 0],
           [0, 0, 1, 1]])
    """
    a, shape = _weight_2d(w, "w")
    s = check_sparsity(sparsity)
    scores = _scores(a)
    (kprime,) = _uniform_kprimes([scores], s)
    return _top(scores, kprime).reshape(shape)


def uniform_global(weights: Mapping, sparsity: float) -> dict:
    """Uniform sparsity for a model: ONE threshold on all layers' column aggregates.

    The paper's network-wide form: each layer's rows are sorted by ``|w|``, each
    sorted column is aggregated by its l2 norm divided by ``sqrt(rows)`` (the
    column's RMS, so layers of different heights compare as average
    magnitudes), and one threshold over all layers' columns picks K' per layer.
    The threshold is placed so the model's kept count is as near
    ``(1 - sparsity) * total`` as whole columns allow (ties in the count: fewer
    kept; ties in RMS: earlier layer, then lower column). Every row of layer L
    keeps its K'_L largest ``|w|``. Returns ``{name: mask}`` in the dict's order.
    """
    names, views, shapes = _weights_2d(weights)
    s = check_sparsity(sparsity)
    scores = [_scores(a) for a in views]
    kprimes = _uniform_kprimes(scores, s)
    return {n: _top(sc, kp).reshape(shape)
            for n, sc, kp, shape in zip(names, scores, kprimes, shapes)}


def row_balanced(w: np.ndarray, sparsity: float) -> np.ndarray:
    """Row-balanced pruning ("Sparse Persistent RNNs"): equal count per row by magnitude.

    Every row keeps its ``nearest((1 - sparsity) * K)`` largest ``|w|``; ties:
    the lower column wins.
    """
    a, shape = _weight_2d(w, "w")
    s = check_sparsity(sparsity)
    return _top(_scores(a), _nearest((1.0 - s) * a.shape[1])).reshape(shape)


# -- structured ----------------------------------------------------------------

def blocked_uniform(w: np.ndarray, sparsity: float, block: int) -> np.ndarray:
    """Blocked-uniform sparsity: the uniform steps on a matrix of block l2 norms.

    ``w`` (M x K, both divisible by ``block``) is aggregated into the
    (M/b) x (K/b) matrix of its b x b blocks' l2 norms; the uniform algorithm
    runs on that matrix (every block-row keeps the same
    ``nearest((1 - sparsity) * K/b)`` blocks of largest norm; ties: lower block
    column wins) and the block mask is expanded back to entries.
    """
    a, shape = _weight_2d(w, "w")
    s = check_sparsity(sparsity)
    b = check_int(block, "block", minimum=1)
    check_divisible(a.shape[0], b, "w.shape[0] (rows)")
    check_divisible(a.shape[1], b, "w.shape[1] (columns; C*R*S for conv)")
    norms = _block_norms(a, b, b)
    (kprime,) = _uniform_kprimes([norms], s)
    return _expand(_top(norms, kprime), b, b).reshape(shape)


def n_m(w: np.ndarray, n: int, m: int, axis: int = 1) -> np.ndarray:
    """N:M semi-structured pruning: exactly ``n`` kept in every group of ``m``.

    Groups are ``m`` consecutive entries along ``axis`` of the 2-D view
    (``axis=1``: along each row, as the ``NM`` format stores them; ``axis=0``:
    down each column). Each group keeps its ``n`` largest ``|w|`` (ties: lower
    index wins), even where the group has fewer than ``n`` nonzeros, so every
    group of the mask holds exactly ``n``.

    >>> n_m(np.array([[1.0, 4.0, 2.0, 3.0]]), 2, 4).astype(int)
    array([[0, 1, 0, 1]])
    """
    a, shape = _weight_2d(w, "w")
    m = check_int(m, "m", minimum=1)
    n = check_int(n, "n", minimum=1, maximum=m)
    axis = check_int(axis, "axis", minimum=0, maximum=1)
    check_divisible(a.shape[axis], m, f"w.shape[{axis}] (the grouped axis)")
    t = a if axis == 1 else a.T
    groups = _scores(t).reshape(t.shape[0], t.shape[1] // m, m)
    keep = _top(groups, n).reshape(t.shape)
    return (keep if axis == 1 else keep.T).reshape(shape)


def block(w: np.ndarray, sparsity: float, shape: tuple[int, int]) -> np.ndarray:
    """Block magnitude pruning: keep the blocks of ``shape`` with the largest l2 norm.

    ``w`` is tiled by ``shape = (rows, cols)`` blocks (its 2-D view must be
    divisible by both); the ``nearest((1 - sparsity) * n_blocks)`` blocks of
    largest l2 norm are kept whole (ties: lower row-major block index wins).
    """
    a, wshape = _weight_2d(w, "w")
    s = check_sparsity(sparsity)
    if not isinstance(shape, (tuple, list)) or len(shape) != 2:
        raise TypeError(f"shape: expected a pair (rows, cols) of block sizes, got {shape!r}")
    br = check_int(shape[0], "shape[0]", minimum=1)
    bc = check_int(shape[1], "shape[1]", minimum=1)
    check_divisible(a.shape[0], br, "w.shape[0] (rows)")
    check_divisible(a.shape[1], bc, "w.shape[1] (columns; C*R*S for conv)")
    norms = _block_norms(a, br, bc)
    keep = _top(norms.ravel(), _nearest((1.0 - s) * norms.size)).reshape(norms.shape)
    return _expand(keep, br, bc).reshape(wshape)


# -- schedules -----------------------------------------------------------------

def gradual_schedule(step: int, *, initial_sparsity: float, final_sparsity: float,
                     begin_step: int, end_step: int, frequency: int = 1) -> float:
    """Sparsity at ``step`` of the cubic ramp (Zhu & Gupta, 2017, eq. 1).

    ``s_t = s_f + (s_i - s_f) * (1 - (t - t0) / (t_end - t0))**3`` where ``t``
    is ``step`` rounded down to the last pruning step ``t0 + j * frequency``.
    Before ``begin_step`` (and at it) the value is ``initial_sparsity``; from
    ``end_step`` on it is ``final_sparsity``. Non-decreasing in ``step``.

    >>> [round(gradual_schedule(t, initial_sparsity=0.0, final_sparsity=0.8,
    ...                         begin_step=0, end_step=4), 4) for t in range(5)]
    [0.0, 0.4625, 0.7, 0.7875, 0.8]
    """
    step = check_int(step, "step", minimum=0)
    si = check_sparsity(initial_sparsity, "initial_sparsity")
    sf = check_sparsity(final_sparsity, "final_sparsity")
    if si > sf:
        raise ValueError(f"initial_sparsity: must be <= final_sparsity ({sf!r}), got {si!r}")
    begin = check_int(begin_step, "begin_step", minimum=0)
    end = check_int(end_step, "end_step", minimum=begin + 1)
    freq = check_int(frequency, "frequency", minimum=1)
    if step >= end:
        return sf
    if step <= begin:
        return si
    t = begin + (step - begin) // freq * freq
    ramp = 1.0 - (1.0 - (t - begin) / (end - begin)) ** 3
    return min(sf, si + (sf - si) * ramp)   # min: an ulp of rounding must not pass s_f


def halving_schedule(rounds: int = 5, start: float = 0.5) -> list[float]:
    """The Sparsity Roofline's fine-tuning levels: each round halves the density.

    ``S_{r+1} = S_r + (1 - S_r) / 2`` from ``S_0 = start`` (the paper's
    "increase the sparsity level by (1 - Sparsity)/2"), so
    ``S_r = 1 - (1 - start) / 2**r``.

    >>> halving_schedule()
    [0.5, 0.75, 0.875, 0.9375, 0.96875]
    """
    rounds = check_int(rounds, "rounds", minimum=1)
    start = check_sparsity(start, "start")
    levels = [start]
    while len(levels) < rounds:
        levels.append(levels[-1] + (1.0 - levels[-1]) / 2.0)
        if levels[-1] >= 1.0:
            raise ValueError(f"rounds: level {len(levels) - 1} rounds to sparsity 1.0 in float64 "
                             f"(start={start!r}), got rounds={rounds}")
    return levels
