"""Predicted vs measured speedup: the recorded runs, the measuring code path (simulator, stand-in timer),
the comparison against the roofline and the registered experiment."""
from __future__ import annotations

import numpy as np
import pytest

from experiments import roofline_vs_measured as rvm
from sparsekit import roofline
from sparsekit.timing import Measurement

H100 = "NVIDIA H100 80GB HBM3"


def test_recorded_table_parses_and_compares():
    rows = rvm.compare_rows(rvm.measured_rows(rvm.RECORDED))
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


def test_problems_come_from_the_suite_and_the_model_zoo():
    full = rvm.problems(quick=False)
    labels = [s.label for s in full]
    assert sum(l.startswith("suite ") for l in labels) == 20
    bert_ffn1 = next(s for s in full if s.label == "bert-base b1 encoder.0.ffn1")
    assert (bert_ffn1.m, bert_ffn1.k, bert_ffn1.n) == (3072, 768, 128)
    big = next(s for s in full if s.label == "transformer-big b16 encoder.0.ffn1")
    assert (big.m, big.k, big.n) == (4096, 1024, 16 * 256)
    assert len(rvm.problems(quick=True)) == 3


class StandInTimer:
    """Runs the launch once more (so the kernel really executes) and returns a fixed time:
    simulated time is no time, and sparsekit.timing.measure refuses to give one."""

    def __init__(self):
        self.calls = 0

    def __call__(self, launch, *, repeat, warmup):
        launch()
        self.calls += 1
        return Measurement(median_s=10e-6, p10_s=9e-6, p90_s=11e-6, samples=(10e-6,), batch=1, warmup=warmup,
                           flush_l2=True, spin_s=0.0, late=0)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_measure_shape_runs_our_kernels_and_checks_them(dtype):
    """The measuring path end to end on the simulator (or a GPU): our three kernels run through their
    library launchers and are checked against float64; PyTorch's providers say why they did not run."""
    timer = StandInTimer()
    shape = rvm.Shape("toy", 16, 32, 8, (0.5,))
    rows = rvm.measure_shape(shape, dtype, timer=timer, repeat=3, device=H100, date="d", torch=None)
    by = {r["provider"]: r for r in rows}
    for name in rvm.OURS:
        r = by[name]
        assert not r["error"] and r["correct"] is True and r["median_us"] == pytest.approx(10.0), r
        assert r["format"] == rvm.PROVIDER_FORMAT[name] and r["nnz"] == 16 * 16
    assert timer.calls == len(rvm.OURS)
    expected_torch = {rvm.DENSE, "cuSPARSE CSR (torch)"} | ({"2:4 cuSPARSELt (torch)"} if dtype == "float16" else set())
    assert {r["provider"] for r in rows if r["error"]} == expected_torch
    assert all("PyTorch with CUDA is not available" in by[p]["error"] for p in expected_torch)


def test_close_is_the_accumulation_bound():
    exact = np.array([[1.0, -2.0]])
    scale = np.array([[3.0, 4.0]])
    ok, rel = rvm.close(exact + 1e-9, exact, scale, np.float32, 8, rvm.U32)
    assert ok and rel == pytest.approx(1e-9 / 3)
    assert not rvm.close(exact + 1e-3, exact, scale, np.float32, 8, rvm.U32)[0]


def _row(problem, provider, fmt, us, *, m=2048, k=512, n=256, dtype="float16", sparsity="", nnz="", isz=0):
    r = dict.fromkeys(rvm.CSV_FIELDS, "")
    r.update(device=H100, date="d", problem=problem, m=str(m), k=str(k), n=str(n), dtype=dtype, sparsity=str(sparsity),
             provider=provider, format=fmt, nnz=str(nnz), index_bytes_per_nnz=str(isz), median_us=str(us),
             correct="True")
    return r


def test_compare_measured_prices_each_format_and_keeps_the_identity(tmp_path):
    from sparsekit.formats import ELL
    from sparsekit.prune import uniform

    w = np.random.default_rng(0).standard_normal((2048, 512)).astype(np.float16)
    ell = ELL.from_dense(w, uniform(w, 0.9))
    rows = [_row("p", rvm.DENSE, "dense", 20.0),
            _row("p", "USpMM config=auto (ours)", "ell", 10.0, sparsity=0.9, nnz=ell.nnz, isz=4),
            _row("p", "cuSPARSE CSR (torch)", "csr", 40.0, sparsity=0.9, nnz=ell.nnz, isz=4),
            _row("p", "2:4 cuSPARSELt (torch)", "2:4", 15.0, sparsity=0.5, nnz=2048 * 256),
            _row("p", "CSR warp/row (ours)", "csr", "", sparsity=0.9, nnz=ell.nnz, isz=4)]
    rows[-1]["error"] = "ValueError: did not run"
    got = {r["kernel"]: r for r in rvm.compare_measured(rows)}
    assert set(got) == {"USpMM config=auto (ours)", "cuSPARSE CSR (torch)", "2:4 cuSPARSELt (torch)"}
    roof = roofline.roof("H100")
    dense = roofline.speed_of_light("dense", 2048, 512, 256, dtype="float16", device=roof)
    want_ell = roofline.speed_of_light(ell, n=256, device=roof)   # the format's own nbytes()
    assert got["USpMM config=auto (ours)"]["predicted speedup"] == pytest.approx(dense.seconds / want_ell.seconds,
                                                                                 rel=1e-3)
    assert got["USpMM config=auto (ours)"]["measured speedup"] == pytest.approx(2.0)
    s24 = roofline.speed_of_light("2:4", 2048, 512, 256, dtype="float16", device=roof)
    assert got["2:4 cuSPARSELt (torch)"]["predicted speedup"] == pytest.approx(dense.seconds / s24.seconds, rel=1e-3)
    for r in got.values():
        assert r["predicted speedup"] / r["measured speedup"] == pytest.approx(r["dense % SoL"] / r["sparse % SoL"],
                                                                               rel=2e-3)   # 4 digits each
    summary = rvm.summarize(list(got.values()))
    assert {s["kernel"] for s in summary} == set(got) | {rvm.BEST_OURS} and all(s["all correct"] for s in summary)
    best = rvm.best_of_ours(list(got.values()))
    assert len(best) == 1 and best[0]["chosen"] == "USpMM config=auto (ours)"
    # the recorded-CSV path gives the same rows
    rvm.write_csv(rows, tmp_path / "m.csv")
    again, source = rvm.load_recorded(tmp_path / "m.csv")
    assert again == list(got.values()) and H100 in source
    assert rvm.plot(again, tmp_path / "p.png", "t") == "p.png" and (tmp_path / "p.png").stat().st_size > 0


def test_unknown_device_is_refused_by_name():
    rows = [_row("p", rvm.DENSE, "dense", 20.0), _row("p", "cuSPARSE CSR (torch)", "csr", 4.0, sparsity=0.9,
                                                       nnz=1000, isz=4)]
    for r in rows:
        r["device"] = "Some Card"
    with pytest.raises(ValueError, match="no datasheet peaks for 'Some Card'"):
        rvm.compare_measured(rows)


def test_budget_stops_before_the_next_shape():
    rows = rvm.measure_all(rvm.problems(quick=True), budget_s=0.0, torch=None, timer=StandInTimer())
    assert len(rows) == 1 and rows[0]["problem"] == "(skipped)"
    assert "time budget 0 s spent before: suite 9 (NLP) float32" in rows[0]["error"]
