"""Property tests of sparsekit.prune (pure NumPy).

"No better choice" is checked as: within each group the pruner must choose
from (a row, an N:M group, a block-row, the whole matrix), the smallest kept
score is >= the largest dropped one. That is exactly "swapping a kept and a
dropped entry of the same group never raises the kept l2 norm": the swap
changes the kept squared norm by ``dropped**2 - kept**2 <= 0``.

Counts are checked against the target without re-implementing the rounding:
``|kept - (1 - s) * n| <= 0.5`` and a half is never rounded up.
"""
from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from sparsekit import prune
from tests.strategies import (conv_shapes, dense_arrays, dtypes, shapes_2d, sparsities,
                              tied_arrays, weight_dicts)


# -- helpers -------------------------------------------------------------------

def readonly(w: np.ndarray) -> np.ndarray:
    """A read-only copy: a pruner that writes into its input raises."""
    w = w.copy()
    w.flags.writeable = False
    return w


def assert_mask(mask, w):
    assert isinstance(mask, np.ndarray) and mask.dtype == np.bool_ and mask.shape == w.shape


def assert_count(kept: int, n: int, sparsity: float):
    """``kept`` is the integer nearest to (1 - s) * n, halves rounded down."""
    target = (1.0 - sparsity) * n
    assert abs(kept - target) <= 0.5
    assert kept - target != 0.5


def assert_no_better_swap(scores: np.ndarray, keep: np.ndarray):
    """Each row of ``scores``/``keep`` (groups x candidates): min kept >= max dropped."""
    kept = np.where(keep, scores, np.inf).min(axis=1)
    dropped = np.where(keep, -np.inf, scores).max(axis=1)
    assert (kept >= dropped).all()


def mags(w: np.ndarray) -> np.ndarray:
    return np.abs(w.astype(np.float64))


def block_norms_loop(w2: np.ndarray, br: int, bc: int) -> np.ndarray:
    """Block l2 norms by explicit loops (independent of prune's reshape route)."""
    m, k = w2.shape
    out = np.empty((m // br, k // bc))
    for i in range(m // br):
        for j in range(k // bc):
            out[i, j] = np.linalg.norm(w2[i * br:(i + 1) * br, j * bc:(j + 1) * bc].astype(np.float64))
    return out


def block_of(mask2: np.ndarray, br: int, bc: int) -> np.ndarray:
    """The block mask of an entry mask, asserting it is constant on every block."""
    m, k = mask2.shape
    tiles = mask2.reshape(m // br, br, k // bc, bc)
    assert (tiles.all(axis=(1, 3)) == tiles.any(axis=(1, 3))).all(), "mask not constant per block"
    return tiles.any(axis=(1, 3))


@st.composite
def weights(draw, *, multiple_of=(1, 1), max_size: int = 24):
    """A 2-D weight of any float dtype with shape divisible by ``multiple_of``."""
    shape = draw(shapes_2d(max_size=max_size, multiple_of=multiple_of))
    return draw(dense_arrays(shape, dtype=draw(dtypes())))


# -- magnitude -----------------------------------------------------------------

@given(w=weights(), s=sparsities())
def test_magnitude_keeps_largest(w, s):
    before = w.copy()
    mask = prune.magnitude(readonly(w), s)
    assert_mask(mask, w)
    assert_count(int(mask.sum()), w.size, s)
    assert_no_better_swap(mags(w).reshape(1, -1), mask.reshape(1, -1))
    np.testing.assert_array_equal(w, before)


@given(layers=weight_dicts(), s=sparsities())
def test_magnitude_global_one_threshold(layers, s):
    masks = prune.magnitude_global({k: readonly(v) for k, v in layers.items()}, s)
    assert list(masks) == list(layers)
    for k, w in layers.items():
        assert_mask(masks[k], w)
    total = sum(w.size for w in layers.values())
    assert_count(sum(int(m.sum()) for m in masks.values()), total, s)
    scores = np.concatenate([mags(w).ravel() for w in layers.values()])
    keep = np.concatenate([m.ravel() for m in masks.values()])
    assert_no_better_swap(scores[None], keep[None])


# -- uniform / row-balanced ----------------------------------------------------

@given(w=weights(), s=sparsities())
def test_uniform_rows_equal_and_largest(w, s):
    mask = prune.uniform(readonly(w), s)
    assert_mask(mask, w)
    counts = mask.sum(axis=1)
    assert (counts == counts[0]).all()
    assert_count(int(counts[0]), w.shape[1], s)
    assert_no_better_swap(mags(w), mask)


@given(w=weights(), s=sparsities())
def test_row_balanced_equals_single_layer_uniform(w, s):
    """On one layer the column threshold only fixes K' (sorted column norms are monotone)."""
    mask = prune.row_balanced(readonly(w), s)
    assert_mask(mask, w)
    assert_no_better_swap(mags(w), mask)
    np.testing.assert_array_equal(mask, prune.uniform(w, s))
    np.testing.assert_array_equal(mask, prune.uniform_global({"w": w}, s)["w"])


def brute_force_kprimes(layers: dict, s: float) -> list[int]:
    """The threshold rule by exhaustion: try every threshold t (each column RMS, and +inf).

    K'_L(t) = #{columns of L with RMS >= t}; pick the t whose kept count
    sum(M_L * K'_L) is nearest (1 - s) * total, fewer kept on a tie.
    """
    rms = {k: np.sqrt(np.mean(np.sort(mags(w), axis=1)[:, ::-1] ** 2, axis=0)) for k, w in layers.items()}
    total = sum(w.size for w in layers.values())
    best = None
    for t in [np.inf, *np.concatenate(list(rms.values()))]:
        kp = [int((r >= t).sum()) for r in rms.values()]
        kept = sum(w.shape[0] * k for w, k in zip(layers.values(), kp))
        key = (abs(kept - (1.0 - s) * total), kept)
        if best is None or key < best[0]:
            best = (key, kp)
    return best[1]


@given(layers=weight_dicts(dtype=np.float64), s=sparsities())
def test_uniform_global_matches_brute_force_threshold(layers, s):
    rms = np.concatenate([np.sqrt(np.mean(mags(w) ** 2, axis=0)) for w in layers.values()])
    assume(np.unique(rms).size == rms.size)   # distinct aggregates: no tie-break involved
    masks = prune.uniform_global({k: readonly(v) for k, v in layers.items()}, s)
    kprimes = []
    for k, w in layers.items():
        assert_mask(masks[k], w)
        counts = masks[k].sum(axis=1)
        assert (counts == counts[0]).all()
        assert_no_better_swap(mags(w), masks[k])
        kprimes.append(int(counts[0]))
    assert kprimes == brute_force_kprimes(layers, s)
    kept = sum(w.shape[0] * kp for w, kp in zip(layers.values(), kprimes))
    total = sum(w.size for w in layers.values())
    assert abs(kept - (1.0 - s) * total) <= max(w.shape[0] for w in layers.values()) / 2


@given(small=st.data(), s=sparsities())
def test_uniform_global_larger_magnitudes_get_larger_kprime(small, s):
    a = small.draw(dense_arrays(small.draw(shapes_2d(max_size=12)), low=0.25, high=1.0))
    b = small.draw(dense_arrays(small.draw(shapes_2d(max_size=12)), low=2.0, high=4.0))
    for layers in ({"a": a, "b": b}, {"b": b, "a": a}):
        masks = prune.uniform_global(layers, s)
        ka, kb = int(masks["a"][0].sum()), int(masks["b"][0].sum())
        assert kb / b.shape[1] >= ka / a.shape[1]
        if ka:
            assert kb == b.shape[1]


@given(w=weights(max_size=12), reps=st.integers(2, 4), s=sparsities())
def test_uniform_global_normalises_layer_height(w, reps, s):
    """A layer that is w stacked ``reps`` times has the same column RMS: K' differs by <= 1."""
    masks = prune.uniform_global({"w": w, "tall": np.vstack([w] * reps)}, s)
    assert abs(int(masks["w"][0].sum()) - int(masks["tall"][0].sum())) <= 1


def test_uniform_small_example():
    """Figure 1's setting (4 columns, 50%): two of four kept in every row, the largest."""
    w = np.array([[0.9, -0.1, 0.5, 0.3],
                  [0.2, 0.8, -0.4, 0.6],
                  [-0.7, 0.05, 0.3, 0.9]])
    np.testing.assert_array_equal(prune.uniform(w, 0.5), [[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 0, 1]])


# -- structured ----------------------------------------------------------------

@given(data=st.data(), s=sparsities())
def test_blocked_uniform(data, s):
    b = data.draw(st.sampled_from([1, 2, 3, 4]))
    w = data.draw(weights(multiple_of=(b, b)))
    mask = prune.blocked_uniform(readonly(w), s, b)
    assert_mask(mask, w)
    keep = block_of(mask, b, b)
    counts = keep.sum(axis=1)
    assert (counts == counts[0]).all()
    assert_count(int(counts[0]), w.shape[1] // b, s)
    assert_no_better_swap(block_norms_loop(w, b, b), keep)


def test_blocked_uniform_block_one_is_uniform():
    w = np.random.default_rng(1).standard_normal((6, 10))
    np.testing.assert_array_equal(prune.blocked_uniform(w, 0.6, 1), prune.uniform(w, 0.6))


@given(data=st.data(), s=sparsities())
def test_block(data, s):
    br, bc = data.draw(st.sampled_from([(1, 1), (1, 4), (2, 2), (4, 1), (2, 3)]))
    w = data.draw(weights(multiple_of=(br, bc)))
    mask = prune.block(readonly(w), s, (br, bc))
    assert_mask(mask, w)
    keep = block_of(mask, br, bc)
    assert_count(int(keep.sum()), keep.size, s)
    assert_no_better_swap(block_norms_loop(w, br, bc).reshape(1, -1), keep.reshape(1, -1))


@given(data=st.data())
def test_n_m(data):
    m = data.draw(st.integers(1, 8))
    n = data.draw(st.integers(1, m))
    axis = data.draw(st.sampled_from([0, 1]))
    w = data.draw(weights(multiple_of=(m, 1) if axis == 0 else (1, m)))
    mask = prune.n_m(readonly(w), n, m, axis=axis)
    assert_mask(mask, w)
    t, mt = (w, mask) if axis == 1 else (w.T, mask.T)
    groups = mt.reshape(-1, m)
    assert (groups.sum(axis=1) == n).all()
    assert_no_better_swap(mags(t).reshape(-1, m), groups)
    np.testing.assert_array_equal(mt, prune.n_m(np.ascontiguousarray(t), n, m, axis=1))


def test_n_m_keeps_exactly_n_in_zero_groups():
    w = np.array([[0.0, 0.0, 0.0, 5.0, 1.0, 2.0, 3.0, 4.0]])
    np.testing.assert_array_equal(prune.n_m(w, 2, 4), [[1, 0, 0, 1, 0, 0, 1, 1]])


# -- ties ----------------------------------------------------------------------

@given(data=st.data())
def test_ties_lower_index_wins(data):
    """All magnitudes equal: every pruner keeps the lowest indices of each group."""
    w = data.draw(tied_arrays((4, 8), levels=1))
    first = np.arange(8) < 4
    np.testing.assert_array_equal(prune.magnitude(w, 0.5), np.arange(32).reshape(4, 8) < 16)
    np.testing.assert_array_equal(prune.row_balanced(w, 0.5), np.tile(first, (4, 1)))
    np.testing.assert_array_equal(prune.uniform(w, 0.5), np.tile(first, (4, 1)))
    np.testing.assert_array_equal(prune.n_m(w, 2, 4), np.tile([1, 1, 0, 0], (4, 2)).astype(bool))
    np.testing.assert_array_equal(prune.block(w, 0.5, (2, 2)), np.arange(32).reshape(4, 8) < 16)
    np.testing.assert_array_equal(prune.blocked_uniform(w, 0.5, 2), np.tile(first, (4, 1)))
    g = prune.uniform_global({"first": w, "second": w}, 0.5)
    assert g["first"].all() and not g["second"].any()
    g = prune.magnitude_global({"first": w, "second": w}, 0.5)
    assert g["first"].all() and not g["second"].any()


@given(w=tied_arrays((6, 12), levels=3), s=sparsities())
def test_ties_deterministic(w, s):
    """Many ties: repeated calls agree and the choice is still among the largest."""
    for f in (prune.magnitude, prune.uniform, prune.row_balanced):
        np.testing.assert_array_equal(f(w, s), f(w.copy(), s))
    assert_no_better_swap(mags(w).reshape(1, -1), prune.magnitude(w, s).reshape(1, -1))
    assert_no_better_swap(mags(w), prune.uniform(w, s))


# -- conv weights ----------------------------------------------------------------

CONV_PRUNERS = {
    "magnitude": lambda w: prune.magnitude(w, 0.7),
    "uniform": lambda w: prune.uniform(w, 0.7),
    "row_balanced": lambda w: prune.row_balanced(w, 0.7),
    "blocked_uniform": lambda w: prune.blocked_uniform(w, 0.5, 2),
    "block": lambda w: prune.block(w, 0.5, (2, 4)),
    "n_m": lambda w: prune.n_m(w, 2, 4),
    "uniform_global": lambda w: prune.uniform_global({"c": w, "d": 2 * w}, 0.7)["c"],
    "magnitude_global": lambda w: prune.magnitude_global({"c": w, "d": 2 * w}, 0.7)["c"],
}


@pytest.mark.parametrize("name", sorted(CONV_PRUNERS))
@given(data=st.data())
def test_conv_weights_flatten_to_k_by_crs(name, data):
    shape = data.draw(conv_shapes(multiple_of=(2, 4)))
    w = data.draw(dense_arrays(shape, dtype=data.draw(dtypes())))
    f = CONV_PRUNERS[name]
    mask = f(readonly(w))
    assert_mask(mask, w)
    np.testing.assert_array_equal(mask, f(w.reshape(shape[0], -1)).reshape(shape))


# -- schedules -------------------------------------------------------------------

@given(si=sparsities(high=0.5), sf=sparsities(low=0.5), begin=st.integers(0, 50),
       length=st.integers(1, 100), freq=st.integers(1, 10))
def test_gradual_schedule_monotone_with_endpoints(si, sf, begin, length, freq):
    end = begin + length
    kw = dict(initial_sparsity=si, final_sparsity=sf, begin_step=begin, end_step=end, frequency=freq)
    values = [prune.gradual_schedule(t, **kw) for t in range(end + 5)]
    assert values[begin] == si and values[0] == si
    assert values[end] == sf and values[-1] == sf
    assert all(a <= b for a, b in zip(values, values[1:]))
    assert all(si <= v <= sf for v in values)
    for t in range(begin, end):   # constant between pruning steps
        assert values[t] == values[begin + (t - begin) // freq * freq]


def test_gradual_schedule_cubic_values():
    kw = dict(initial_sparsity=0.0, final_sparsity=0.8, begin_step=0, end_step=4)
    assert [prune.gradual_schedule(t, **kw) for t in range(5)] == pytest.approx(
        [0.0, 0.8 * (1 - 0.75**3), 0.8 * (1 - 0.5**3), 0.8 * (1 - 0.25**3), 0.8], abs=1e-15)


def test_halving_schedule_paper_levels():
    assert prune.halving_schedule() == [0.5, 0.75, 0.875, 0.9375, 0.96875]


@given(rounds=st.integers(1, 20), start=sparsities(high=0.99))
def test_halving_schedule_halves_density(rounds, start):
    levels = prune.halving_schedule(rounds, start)
    assert len(levels) == rounds and levels[0] == start
    for a, b in zip(levels, levels[1:]):
        assert b == a + (1 - a) / 2
        assert a < b < 1.0


# -- bad input -------------------------------------------------------------------

W = np.ones((4, 8), dtype=np.float32)
SINGLE = {
    "magnitude": lambda w: prune.magnitude(w, 0.5),
    "uniform": lambda w: prune.uniform(w, 0.5),
    "row_balanced": lambda w: prune.row_balanced(w, 0.5),
    "blocked_uniform": lambda w: prune.blocked_uniform(w, 0.5, 2),
    "block": lambda w: prune.block(w, 0.5, (2, 2)),
    "n_m": lambda w: prune.n_m(w, 2, 4),
}
GLOBAL = {
    "magnitude_global": lambda d, s=0.5: prune.magnitude_global(d, s),
    "uniform_global": lambda d, s=0.5: prune.uniform_global(d, s),
}
BAD_WEIGHTS = [
    (np.ones(8, np.float32), ValueError, "2-D or 4-D"),
    (np.ones((2, 2, 2), np.float32), ValueError, "2-D or 4-D"),
    (np.ones((4, 8), np.int32), TypeError, "dtype"),
    (np.ones((4, 8), np.complex64), TypeError, "dtype"),
    ([[1.0, 2.0]], TypeError, "numpy.ndarray"),
    (np.full((4, 8), np.nan, np.float32), ValueError, "finite"),
    (np.array([[1.0, np.inf, 1.0, 1.0]] * 4, np.float64).repeat(2, 1), ValueError, "finite"),
    (np.ones((0, 8), np.float32), ValueError, "at least one element"),
]


@pytest.mark.parametrize("bad,exc,words", BAD_WEIGHTS)
@pytest.mark.parametrize("name", sorted(SINGLE))
def test_bad_weight(name, bad, exc, words):
    with pytest.raises(exc, match=f"^w: .*{words}"):
        SINGLE[name](bad)


@pytest.mark.parametrize("bad,exc,words", BAD_WEIGHTS)
@pytest.mark.parametrize("name", sorted(GLOBAL))
def test_bad_weight_in_model(name, bad, exc, words):
    with pytest.raises(exc, match=rf"^weights\['bad'\]: .*{words}"):
        GLOBAL[name]({"ok": W, "bad": bad})


@pytest.mark.parametrize("name", sorted(GLOBAL))
def test_bad_model(name):
    with pytest.raises(ValueError, match="^weights: .*at least one layer"):
        GLOBAL[name]({})
    with pytest.raises(TypeError, match="^weights: expected a dict"):
        GLOBAL[name]([W])
    with pytest.raises(ValueError, match="^sparsity: must lie in"):
        GLOBAL[name]({"a": W}, 1.0)


BAD_SPARSITY = [(-0.1, ValueError), (1.0, ValueError), (1.5, ValueError), (float("nan"), ValueError),
                ("0.5", TypeError), (True, TypeError), (None, TypeError)]
SPARSITY_PRUNERS = {
    "magnitude": lambda s: prune.magnitude(W, s),
    "uniform": lambda s: prune.uniform(W, s),
    "row_balanced": lambda s: prune.row_balanced(W, s),
    "blocked_uniform": lambda s: prune.blocked_uniform(W, s, 2),
    "block": lambda s: prune.block(W, s, (2, 2)),
    "magnitude_global": lambda s: prune.magnitude_global({"a": W}, s),
    "uniform_global": lambda s: prune.uniform_global({"a": W}, s),
}


@pytest.mark.parametrize("bad,exc", BAD_SPARSITY)
@pytest.mark.parametrize("name", sorted(SPARSITY_PRUNERS))
def test_bad_sparsity(name, bad, exc):
    with pytest.raises(exc, match="^sparsity: "):
        SPARSITY_PRUNERS[name](bad)


@pytest.mark.parametrize("call,exc,pattern", [
    (lambda: prune.n_m(W, 5, 4), ValueError, r"^n: must be <= 4, got 5"),
    (lambda: prune.n_m(W, 0, 4), ValueError, r"^n: must be >= 1"),
    (lambda: prune.n_m(W, 1, 0), ValueError, r"^m: must be >= 1"),
    (lambda: prune.n_m(W, 2, 3), ValueError, r"^w.shape\[1\].*divisible by 3, got 8"),
    (lambda: prune.n_m(W, 2, 8, axis=0), ValueError, r"^w.shape\[0\].*divisible by 8, got 4"),
    (lambda: prune.n_m(W, 2, 4, axis=2), ValueError, r"^axis: must be <= 1"),
    (lambda: prune.n_m(W, 2.0, 4), TypeError, r"^n: expected an integer"),
    (lambda: prune.blocked_uniform(W, 0.5, 3), ValueError, r"^w.shape\[0\].*divisible by 3, got 4"),
    (lambda: prune.blocked_uniform(np.ones((4, 6), np.float32), 0.5, 4), ValueError,
     r"^w.shape\[1\].*divisible by 4, got 6"),
    (lambda: prune.blocked_uniform(W, 0.5, 0), ValueError, r"^block: must be >= 1"),
    (lambda: prune.blocked_uniform(W, 0.5, (2, 2)), TypeError, r"^block: expected an integer"),
    (lambda: prune.block(W, 0.5, (3, 2)), ValueError, r"^w.shape\[0\].*divisible by 3, got 4"),
    (lambda: prune.block(W, 0.5, (2, 3)), ValueError, r"^w.shape\[1\].*divisible by 3, got 8"),
    (lambda: prune.block(W, 0.5, 2), TypeError, r"^shape: expected a pair"),
    (lambda: prune.block(W, 0.5, (2, 2, 2)), TypeError, r"^shape: expected a pair"),
    (lambda: prune.block(W, 0.5, (0, 2)), ValueError, r"^shape\[0\]: must be >= 1"),
    (lambda: prune.block(np.ones((2, 3, 3, 3), np.float32), 0.5, (2, 2)), ValueError,
     r"^w.shape\[1\].*divisible by 2, got 27"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_structure_arguments(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


GRADUAL = dict(initial_sparsity=0.0, final_sparsity=0.9, begin_step=10, end_step=20)


@pytest.mark.parametrize("change,exc,pattern", [
    (dict(step=-1), ValueError, r"^step: must be >= 0"),
    (dict(step=1.5), TypeError, r"^step: expected an integer"),
    (dict(initial_sparsity=0.95), ValueError, r"^initial_sparsity: must be <= final_sparsity"),
    (dict(final_sparsity=1.0), ValueError, r"^final_sparsity: must lie in"),
    (dict(initial_sparsity=-0.5), ValueError, r"^initial_sparsity: must lie in"),
    (dict(end_step=10), ValueError, r"^end_step: must be >= 11"),
    (dict(begin_step=-1), ValueError, r"^begin_step: must be >= 0"),
    (dict(frequency=0), ValueError, r"^frequency: must be >= 1"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_gradual_schedule(change, exc, pattern):
    kw = {"step": 5, **GRADUAL, **change}
    with pytest.raises(exc, match=pattern):
        prune.gradual_schedule(kw.pop("step"), **kw)


@pytest.mark.parametrize("kw,exc,pattern", [
    (dict(rounds=0), ValueError, r"^rounds: must be >= 1"),
    (dict(rounds=2.0), TypeError, r"^rounds: expected an integer"),
    (dict(start=1.0), ValueError, r"^start: must lie in"),
    (dict(rounds=80), ValueError, r"^rounds: level 53 rounds to sparsity 1.0"),
])
def test_bad_halving_schedule(kw, exc, pattern):
    with pytest.raises(exc, match=pattern):
        prune.halving_schedule(**kw)


def test_docstring_examples_run():
    assert doctest.testmod(prune).failed == 0


@given(data=st.data())
def test_top_is_the_stable_order_of_scores_with_ties(data):
    """The partition behind every pruner keeps exactly what a stable descending sort keeps: the ``k`` largest
    scores along the last axis, equal ones by lower index (scores from a few values, so ties are common)."""
    shape = data.draw(st.lists(st.integers(1, 7), min_size=1, max_size=3).map(tuple))
    scores = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=int(np.prod(shape)),
                                         max_size=int(np.prod(shape))))).reshape(shape)
    k = data.draw(st.integers(0, shape[-1] + 1))
    order = np.argsort(-scores, axis=-1, kind="stable")
    want = np.zeros(shape, dtype=bool)
    np.put_along_axis(want, order[..., :k], True, axis=-1)
    assert (prune._top(scores, k) == want).all()
