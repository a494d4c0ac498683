"""The decode-shape benchmark's pieces without a GPU: the pruned weight it times, the layout each route reads and
its bytes, and the experiment's toy check of the decode and bitmap routes (the simulator, or a GPU)."""
from __future__ import annotations

import numpy as np
import pytest

from experiments.bench_uspmm_decode import TOY, check_toy
from sparsekit.bench.uspmm_decode import DTYPES, NS, pruned_weight, route_layout, value_dtype

@pytest.mark.parametrize("dname", DTYPES)
def test_pruned_weight_keeps_the_same_count_a_row(dname):
    ell, pruned, seconds = pruned_weight(48, 80, 0.75, value_dtype(dname), seed=3)
    assert ell.values.dtype == value_dtype(dname) and ell.shape == (48, 80) and seconds >= 0
    assert (np.count_nonzero(pruned, axis=1) <= 20).all() and ell.values.shape == (48, 20)
    np.testing.assert_array_equal(ell.to_dense(), pruned)


def test_each_route_names_the_layout_it_reads_and_its_bytes():
    from sparsekit.gpu.uspmm import prepare

    ell, _, _ = pruned_weight(64, 96, 0.5, value_dtype("float16"), seed=1)
    dell = prepare(ell)
    kept = 64 * 48                                       # compact rows at N = 1: 3.25 bytes a slot, 48 slots a row
    for variant, n, low, high in (("decode", 1, 3.25 * kept, 3.25 * kept), ("decode", 8, 4 * kept, 5 * kept),
                                  ("bitmap", 16, 2 * kept, 4 * kept), ("tensor_core", 128, 4 * kept, 6 * kept + 1)):
        build, nbytes = route_layout(dell, variant, n)
        build()
        assert low <= nbytes() <= high, (variant, n, nbytes())
    assert 128 in NS and 1 in NS
    sparse, _, _ = pruned_weight(64, 96, 0.92, value_dtype("float16"), seed=1)   # 8 of 96 a row: padded ELL rows
    assert sparse.values.shape[1] == 8
    build, nbytes = route_layout(prepare(sparse), "decode", 1)
    build()
    assert nbytes() == 4 * 64 * 8


def test_the_toy_check_covers_both_routes_and_is_correct():
    recs = check_toy()
    assert {(r["route"], r["n"]) for r in recs} == {("decode", 1), ("decode", 8), ("bitmap", 8), ("bitmap", 16)}
    assert {r["dtype"] for r in recs} == set(DTYPES) and all(r["shape"] == f"{TOY[0]}x{TOY[1]}" for r in recs)
    assert all(r["correct"] for r in recs), [r for r in recs if not r["correct"]]
