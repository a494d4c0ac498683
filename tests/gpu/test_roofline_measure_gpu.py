"""The roofline-vs-measured sweep on a real GPU: every provider that runs is correct and timed, and
the comparison prices every measured sparse row."""
from __future__ import annotations

import pytest

from experiments import roofline_vs_measured as rvm

pytestmark = pytest.mark.gpu


def test_measure_small_problem_on_the_gpu(tmp_path):
    shape = rvm.Shape("suite 11 (NLP)", 512, 512, 256, (0.9,))
    rows = rvm.measure_all([shape], repeat=5)
    ran = [r for r in rows if not r["error"]]
    assert {r["provider"] for r in ran} >= set(rvm.OURS), [r["error"] for r in rows if r["error"]]
    assert all(r["correct"] is True and r["median_us"] > 0 for r in ran), ran
    torch = rvm._torch()
    if torch is None:
        pytest.skip("PyTorch with CUDA is not installed: only our kernels were measured")
    assert {rvm.DENSE, "cuSPARSE CSR (torch)"} <= {r["provider"] for r in ran}
    two_four = next(r for r in rows if r["provider"] == "2:4 cuSPARSELt (torch)")
    # cuSPARSELt either runs (and is checked above) or its refusal is recorded word for word
    assert two_four["median_us"] or "torch._cslt_sparse_mm" in two_four["error"]
    compared = rvm.compare_measured(rows)
    assert {r["kernel"] for r in compared} == {r["provider"] for r in ran} - {rvm.DENSE}
    rvm.write_csv(rows, tmp_path / "m.csv")
    assert rvm.load_recorded(tmp_path / "m.csv")[0] == compared
