"""sparsekit.balance: row statistics, mapping imbalance, row swizzle and the two block-balancing schemes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparsekit import balance as bal
from sparsekit.formats import CSR
from tests.strategies import shapes_2d, sparse_dense


@st.composite
def csrs(draw, *, max_size: int = 40):
    return CSR.from_dense(draw(sparse_dense(draw(shapes_2d(max_size=max_size)))))


@given(csrs())
def test_row_stats_agree_with_the_matrix(a):
    dense = a.to_dense() != 0
    lengths = bal.row_lengths(a)
    assert np.array_equal(lengths, dense.sum(axis=1))
    s = bal.row_stats(a)
    assert s["nnz"] == a.nnz and s["max"] == lengths.max() and s["min"] == lengths.min()
    assert s["empty_rows"] == int((lengths == 0).sum())
    assert s["row_sparsity_min"] <= s["row_sparsity_max"]


@given(csrs(), st.sampled_from([0.01, 0.1, 0.5, 1.0]))
def test_heavy_row_share_bounds(a, fraction):
    share = bal.heavy_row_share(a, fraction)
    if a.nnz == 0:
        assert share == 0.0
    else:
        top = max(1, int(round(fraction * a.shape[0])))
        assert top / a.shape[0] - 1e-12 <= share <= 1.0   # the heaviest rows hold at least their share


@given(csrs())
def test_row_swizzle_sorts_rows_by_decreasing_length(a):
    order = bal.row_swizzle(a)
    assert np.array_equal(np.sort(order), np.arange(a.shape[0]))
    assert (np.diff(bal.row_lengths(a)[order]) <= 0).all()


@given(csrs(), st.sampled_from([1, 4, 32]), st.sampled_from([1, 2, 4]))
def test_swizzle_never_lowers_warp_efficiency(a, rpw, wpb):
    # Grouping sorted lengths minimises the sum of group maxima, hence the lockstep waste.
    natural = bal.mapping_imbalance(a, rows_per_warp=rpw, warps_per_block=wpb)
    swizzled = bal.mapping_imbalance(a, rows_per_warp=rpw, warps_per_block=wpb, order=bal.row_swizzle(a))
    assert 0 < natural["warp_efficiency"] <= 1 and natural["block_imbalance"] >= 1
    assert swizzled["warp_efficiency"] >= natural["warp_efficiency"] - 1e-12


def test_mapping_imbalance_by_hand():
    # rows 4,1,0,2 ; two rows per warp, one warp per block:
    # warps (4,1) -> 4 steps x 2 lanes, (0,2) -> 2 x 2: efficiency 7/12; blocks cost 4 and 2: 4/3.
    a = CSR.from_dense(np.array([[1., 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0]]))
    r = bal.mapping_imbalance(a, rows_per_warp=2, warps_per_block=1)
    assert r == {"warp_efficiency": pytest.approx(7 / 12), "block_imbalance": pytest.approx(4 / 3), "blocks": 2}


@given(csrs(), st.sampled_from([1, 4, 32]), st.integers(1, 6), st.booleans())
def test_makespan_bounds(a, rpw, slots, swizzle):
    order = bal.row_swizzle(a) if swizzle else None
    r = bal.mapping_imbalance(a, rows_per_warp=rpw, warps_per_block=2, order=order, slots=slots)
    if a.nnz == 0:
        return
    # In units of the ideal nnz / slots: one slot runs everything, 1 / warp_efficiency;
    # Graham's bound: greedy list scheduling ends within (2 - 1/slots) x the lower bound
    # max(total cost / slots, largest block).
    waste = 1 / r["warp_efficiency"]
    largest = r["block_imbalance"] * waste * slots / r["blocks"]
    assert 1.0 - 1e-12 <= r["makespan"] <= (2 - 1 / slots) * max(waste, largest) + 1e-9
    one = bal.mapping_imbalance(a, rows_per_warp=rpw, warps_per_block=2, order=order, slots=1)
    assert one["makespan"] == pytest.approx(waste)


@given(csrs(), st.integers(1, 8))
def test_split_m_covers_rows_with_bounded_excess(a, blocks):
    plan = bal.split_m(a, blocks)
    m = a.shape[0]
    assert plan.start[0] == 0 and plan.stop[-1] == m and np.array_equal(plan.start[1:], plan.stop[:-1])
    assert plan.nnz.sum() == a.nnz and len(plan.nnz) <= blocks and (plan.tiles == 1).all()
    # A block overshoots the even share by less than one row.
    assert (plan.nnz <= a.nnz / blocks + bal.row_lengths(a).max(initial=0)).all()


@given(csrs(), st.sampled_from([1, 4, 32]), st.integers(1, 8))
def test_split_k_is_even_but_crosses_tiles(a, tile_m, blocks):
    plan = bal.split_k(a, tile_m, blocks)
    assert plan.nnz.sum() == a.nnz and plan.nnz.max() - plan.nnz.min() <= 1
    assert np.array_equal(plan.start[1:], plan.stop[:-1])
    n_tiles = -(-a.shape[0] // tile_m)
    assert (plan.tiles <= n_tiles).all()
    assert (plan.nnz <= -(-a.nnz // blocks)).all()


@given(csrs(), st.sampled_from([1, 4, 32]))
def test_equal_m_tiles_baseline(a, tile_m):
    plan = bal.equal_m_tiles(a, tile_m)
    assert plan.nnz.sum() == a.nnz and plan.start.size == -(-a.shape[0] // tile_m)


def test_errors():
    a = CSR.from_dense(np.eye(3))
    with pytest.raises(ValueError, match="fraction"):
        bal.heavy_row_share(a, 0.0)
    with pytest.raises(ValueError, match="order: must be a permutation"):
        bal.mapping_imbalance(a, rows_per_warp=1, warps_per_block=1, order=np.array([0, 0, 1]))
    with pytest.raises(ValueError, match="rows_per_warp: must be >= 1"):
        bal.mapping_imbalance(a, rows_per_warp=0, warps_per_block=1)
    with pytest.raises(TypeError, match="csr: expected a CSR matrix"):
        bal.row_lengths(np.eye(3))
