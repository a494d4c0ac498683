"""sparsekit.loop_orders: the slides' cost table, and a cache simulator that agrees with it."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparsekit import loop_orders as lo


def test_ijk_reproduces_the_slides_table():
    # ../shared/papers/spmm-course-slides.txt, "Loop Interchange".
    rows = [(r["loop"], r["A"], r["B"], r["C"]) for r in lo.cost_table(lo.dense_nest("ijk"))]
    assert rows == [("i", "N", "N", "N"), ("j", "N", "N", "N/B"), ("k", "N/B", "N", "1"),
                    ("total", "N^3/B", "N^3", "N^2/B")]


def test_textbook_ranking_of_dense_orders():
    # Misses per inner iteration (B = 4): ikj/kij about 0.5, ijk/jik about 1.25, jki/kji about 2.
    totals = {o: sum(lo.predicted_misses(lo.dense_nest(o), {"N": 64}, line=4).values())
              for o in lo.DENSE_ORDERS}
    assert totals["ikj"] < totals["kij"] < totals["ijk"] < totals["jik"] < totals["kji"] < totals["jki"]


@given(st.sampled_from(lo.DENSE_ORDERS), st.sampled_from([(8, 2), (16, 4), (16, 8), (24, 4)]),
       st.integers(3, 4))
def test_dense_table_equals_simulated_misses(order, n_line, capacity):
    # The table's model: a cache that holds a few lines but less than a row (capacity < N/B).
    n, line = n_line
    pred = lo.predicted_misses(lo.dense_nest(order), {"N": n}, line=line)
    sim = lo.simulate_misses(lo.dense_trace(order, n), line=line, capacity=capacity)
    assert {a: sim[a] for a in "ABC"} == pred
    assert sim["accesses"] == {"A": n ** 3, "B": n ** 3, "C": n ** 3}


def _circulant(m: int, k: int, r: int):
    """Row i holds columns (i + t * k // r) mod k: r per row and m * r / k per column."""
    cols = np.sort((np.arange(m)[:, None] + np.arange(r)[None, :] * (k // r)) % k, axis=1)
    return np.arange(0, m * r + 1, r), cols.ravel()


@given(st.sampled_from(lo.CSR_ORDERS), st.sampled_from([(16, 32, 8), (32, 64, 16), (32, 32, 8)]),
       st.sampled_from([16, 32]))
def test_csr_table_equals_simulated_misses(order, mkr, n):
    # As for dense, the model needs a cache (4 lines) smaller than the footprint of an inner
    # loop: a row of B or C (n / line lines) and a row of A (r / line lines, r >= 2 * line).
    m, k, r = mkr
    line = 4
    indptr, indices = _circulant(m, k, r)
    sizes = {"M": m, "K": k, "N": n, "r": r, "c": m * r // k}
    pred = lo.predicted_misses(lo.csr_nest(order), sizes, line=line)
    sim = lo.simulate_misses(lo.csr_trace(order, indptr, indices, (m, k), n), line=line, capacity=4)
    assert {a: sim[a] for a in "ABC"} == pred
    assert sim["accesses"] == {"A": m * r * n, "B": m * r * n, "C": m * r * n}


def test_rowwise_beats_dot_product_order_by_a_line():
    # The lesson: Gustavson reads B along rows (nnz*N/B lines), the dot-product order down columns (nnz*N).
    sizes = {"M": 64, "K": 64, "N": 64, "r": 16, "c": 16}
    row = lo.predicted_misses(lo.csr_nest("rowwise"), sizes, line=16)
    inner = lo.predicted_misses(lo.csr_nest("inner"), sizes, line=16)
    assert inner["B"] == 16 * row["B"]


def test_order_table_records():
    recs = lo.order_table(n=8, line=2, capacity=3)
    assert [r["order"] for r in recs] == list(lo.DENSE_ORDERS)
    for r in recs:
        for a in "ABC":
            assert r[f"{a} predicted"] == r[f"{a} simulated"]


def test_errors():
    with pytest.raises(ValueError, match="order: expected a permutation"):
        lo.dense_nest("iij")
    with pytest.raises(ValueError, match="order: expected one of"):
        lo.csr_nest("ijk")
    with pytest.raises(ValueError, match=r"sizes\['N'\]: must be a multiple of line = 4"):
        lo.predicted_misses(lo.dense_nest("ijk"), {"N": 6}, line=4)
    with pytest.raises(ValueError, match="capacity: must be >= 1"):
        lo.simulate_misses(iter(()), line=4, capacity=0)
