"""The predicted-vs-measured comparison reads the recorded H100 table and keeps the paper's identity."""
from __future__ import annotations

import pytest

from experiments import roofline_vs_measured as rvm


def test_recorded_table_parses_and_compares():
    rows = rvm.compare_rows(rvm.measured_rows(rvm.Path(rvm.__file__).parent / "results" / "uspmm.md"))
    assert {r["sparse kernel"] for r in rows} == set(rvm.SPARSE_KIND)
    for r in rows:
        # Section 3.4: predicted / measured == dense fraction / sparse fraction of speed of light.
        ratio = r["predicted speedup"] / r["measured speedup"]
        assert ratio == pytest.approx(r["dense % SoL"] / r["sparse % SoL"], rel=1e-9)


def test_registered_experiment_writes_table_and_plot(tmp_path):
    from sparsekit.experiment import Context

    section = rvm.EXPERIMENT.run(Context(quick=True, backend="simulator", out_dir=tmp_path))
    assert section.tables[0].records and section.figures == ["predicted_vs_measured.png"]
    assert (tmp_path / "predicted_vs_measured.png").stat().st_size > 0
