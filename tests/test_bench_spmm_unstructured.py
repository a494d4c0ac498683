"""experiments/bench_spmm_unstructured.py without a GPU: its options, run-time estimate, budget stop, records, JSON
and plot (on fabricated records); and, on a GPU with PyTorch, a small run whose every point of ours is correct."""
from __future__ import annotations

import json

import pytest

from experiments import bench_spmm_unstructured as bu
from sparsekit.experiment import read_record


def test_options_select_the_points():
    args = bu.parse([])
    assert (args.shapes, args.sparsities, args.widths, args.dtypes) == (bu.SHAPES, bu.SPARSITIES, bu.NS,
                                                                        bu.DTYPE_NAMES)
    assert args.budget_s == bu.BUDGET_S
    args = bu.parse(["--shapes", "14336x4096", "64X128", "--sparsities", "0.8", "--widths", "8", "1024",
                     "--dtypes", "float16", "--budget-s", "30", "--out", "somewhere"])
    assert args.shapes == [(14336, 4096), (64, 128)] and args.sparsities == [0.8] and args.widths == [8, 1024]
    assert args.dtypes == ["float16"] and args.budget_s == 30 and str(args.out) == "somewhere"


@pytest.mark.parametrize("bad", [["--sparsities", "1.0"], ["--widths", "0"], ["--dtypes", "float32"],
                                 ["--shapes", "4096"]])
def test_options_refuse_bad_values(bad, capsys):
    with pytest.raises(SystemExit):
        bu.parse(bad)
    assert "error" in capsys.readouterr().err


def test_the_default_run_is_estimated_under_six_minutes():
    full = bu.estimate_s(bu.SHAPES, bu.SPARSITIES, bu.NS, bu.DTYPE_NAMES)
    assert full["total"] == pytest.approx(sum(v for k, v in full.items() if k != "total"))
    assert 120 < full["total"] < 360 < bu.BUDGET_S
    part = bu.estimate_s(bu.SHAPES[:1], [0.9], [8], ["bfloat16"])
    assert part["total"] < full["total"] / 4 and part["pruning"] < full["pruning"]


class FakeClock:
    """Seconds that advance by ``step`` at every reading."""

    def __init__(self, step):
        self.now, self.step = 0.0, step

    def __call__(self):
        self.now += self.step
        return self.now


def test_the_sweep_stops_cleanly_when_the_budget_is_spent(capsys):
    built, benched = [], []

    def build(m, k, s, d):
        built.append((m, k, s, d))
        return (m, k, s, d)

    def bench(layer, n):
        benched.append((layer, n))
        return [dict(layer=layer, n=n)]

    plan = [(64, 64, s, "bfloat16") for s in (0.5, 0.7, 0.9)]
    budget = bu.Budget(5.0, clock=FakeClock(1.0))           # every check after the start costs a second
    records, stopped = bu.sweep(plan, [8, 32], budget, build, bench)
    assert stopped                                          # checks 1-4 pass: item 0 whole, item 1 built
    assert built == plan[:2] and benched == [(plan[0], 8), (plan[0], 32)]
    assert records == [dict(layer=plan[0], n=8), dict(layer=plan[0], n=32)]
    out = capsys.readouterr().out
    assert "# budget of 5 s spent at 5 s: stopped before (64, 64, 0.7, 'bfloat16') N=8 (2 records kept)" in out
    records, stopped = bu.sweep(plan, [8, 32], bu.Budget(1e9), build, bench)
    assert not stopped and len(records) == 6


def test_a_failing_point_prints_fail_and_the_sweep_goes_on(capsys):
    def build(m, k, s, d):
        if s == 0.5:
            raise RuntimeError("no format")
        return s

    def bench(layer, n):
        if n == 8:
            raise ValueError("no launch")
        return [dict(s=layer, n=n)]

    plan = [(64, 64, s, "float16") for s in (0.5, 0.9)]
    records, stopped = bu.sweep(plan, [8, 32], bu.Budget(1e9), build, bench)
    out = capsys.readouterr().out
    assert not stopped and records == [dict(s=0.9, n=32)]
    assert "FAIL format (64, 64, 0.5, 'float16'): RuntimeError: no format" in out
    assert "FAIL (64, 64, 0.9, 'float16') N=8: ValueError: no launch" in out


def record(kernel, us, *, sparsity=0.8, n=8, correct=True, m=4096, k=4096, dname="bfloat16", nbytes=None,
           dense_us=40.0, status="ok"):
    if status != "ok":
        return bu.make_record(m, k, dname, sparsity, n, kernel, status=status, reason="PyTorch says no")
    return bu.make_record(m, k, dname, sparsity, n, kernel, times=(us, 0.9 * us, 1.1 * us), dense_us=dense_us,
                          nbytes=nbytes or 2 * m * k // 4, err=None if kernel == bu.DENSE else (0.01, correct),
                          bandwidth=4e12)


def test_a_record_derives_speedup_bytes_and_bandwidth_share():
    r = record(bu.BITMAP, 20.0, nbytes=8 << 20)
    assert r["speedup"] == pytest.approx(2.0) and r["bytes_vs_dense"] == pytest.approx(0.25)
    assert r["pct_bandwidth"] == pytest.approx(100 * (8 << 20) / 20e-6 / 4e12)
    assert (r["max_err"], r["correct"], r["p10_us"], r["p90_us"]) == (0.01, True, 18.0, 22.0)
    na = record(bu.CUSPARSE, None, status="n/a")
    assert na["status"] == "n/a" and na["us"] is None and na["speedup"] is None and na["correct"] is None


def fabricated():
    """Two shapes, one dtype, three sparsities, N = 8 and 32: ours faster with sparsity, one of ours fast but
    wrong, cuSPARSE slow, cuSPARSELt at 50 % only."""
    recs = []
    for m, k in ((4096, 4096), (14336, 4096)):
        for s in (0.5, 0.7, 0.9):
            for n in (8, 32):
                dense = 40.0 * m / 4096
                recs += [record(bu.DENSE, dense, m=m, k=k, sparsity=s, n=n, dense_us=dense),
                         record(bu.BITMAP, dense * (1 - s) * 1.5, m=m, k=k, sparsity=s, n=n, dense_us=dense),
                         record(bu.TILED, dense * (1 - s), m=m, k=k, sparsity=s, n=n, dense_us=dense, correct=False),
                         record(bu.CSR_AUTO, dense * (1 - s) * 2, m=m, k=k, sparsity=s, n=n, dense_us=dense),
                         record(bu.CUSPARSE, dense * 5, m=m, k=k, sparsity=s, n=n, dense_us=dense)]
                if s == 0.5:
                    recs.append(record(bu.CUSPARSELT, dense * 0.7, m=m, k=k, sparsity=s, n=n, dense_us=dense))
    return recs


def test_the_summary_takes_the_fastest_correct_kernel_of_ours():
    rows = bu.summarize(fabricated())
    assert len(rows) == 2 * 3 * 2
    for row in rows:
        assert row["best_ours"] == bu.BITMAP                       # tiled is faster, but out of bound
        assert row["speedup_vs_dense"] == pytest.approx(1 / ((1 - row["sparsity"]) * 1.5))
        assert row["vs_cusparse"] == pytest.approx(5 / ((1 - row["sparsity"]) * 1.5))
        assert (row["vs_cusparselt"] is None) == (row["sparsity"] != 0.5)


def test_the_line_of_a_point_shows_each_kernel():
    recs = [r for r in fabricated() if r["shape"] == "4096x4096" and r["sparsity"] == 0.5 and r["n"] == 8
            and r["kernel"] != bu.CUSPARSE] + [record(bu.CUSPARSE, None, sparsity=0.5, status="n/a")]
    text = bu.line(recs[::-1])
    assert text.startswith("4096x4096 bfloat16 50% N=   8: dense 40.0 | bitmap 30.0 1.33x")
    assert "tiled 20.0 2.00x" in text and " BAD" in text and "cuSPARSE n/a" in text and "2:4 28.0 1.43x" in text


def test_json_and_plot_of_fabricated_records(tmp_path):
    recs = fabricated()
    written = bu.write(recs, tmp_path / "out", command="python -m experiments.bench_spmm_unstructured",
                       bandwidth=4e12, stopped_by_budget=False)
    assert [p.name for p in written] == ["spmm_unstructured.json", "spmm_unstructured.png"]
    data = json.loads((tmp_path / "out" / "spmm_unstructured.json").read_text())
    assert data["records"] == recs and data["bandwidth"] == 4e12 and data["stopped_by_budget"] is False
    assert data["summary"] == bu.summarize(recs)
    png = (tmp_path / "out" / "spmm_unstructured.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_a_run_with_no_sparse_time_writes_the_json_alone(tmp_path):
    recs = [record(bu.DENSE, 40.0), record(bu.CUSPARSE, None, status="n/a")]
    written = bu.write(recs, tmp_path, bandwidth=4e12)
    assert [p.name for p in written] == ["spmm_unstructured.json"]


@pytest.mark.gpu
def test_a_small_run_on_the_gpu_is_correct(tmp_path):
    torch = pytest.importorskip("torch", reason="the benchmark's operands and baselines are PyTorch tensors")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    assert bu.main(["--shapes", "256x512", "512x256", "--sparsities", "0.5", "0.9", "--widths", "8", "64", "256",
                    "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "spmm_unstructured.json").read_text())
    recs = data["records"]
    assert not data["stopped_by_budget"]
    assert not [r for r in recs if r["status"] == "FAIL" and r["kernel"] in bu.OURS + (bu.DENSE,)]
    from sparsekit.gpu import spmm_bitmap, spmm_tiled

    ours = [r for r in recs if r["kernel"] in bu.OURS]
    a_layer = sum(1 + (n <= spmm_bitmap.MAX_N) + (n <= spmm_tiled.MAX_N) for n in (8, 64, 256))
    assert len(ours) == 2 * 2 * 2 * a_layer and all(r["correct"] for r in ours)
    assert all(r["bytes"] and r["us"] > 0 for r in ours)
    assert (tmp_path / "spmm_unstructured.png").stat().st_size > 0


def test_reproduce_toy_check_is_correct_on_every_route():
    """``sparsekit reproduce --only spmm_unstructured``'s check without a GPU (on a GPU the same kernels): spmm_csr's default route (the row kernel at
    N = 8 and 90 %, TiledBitmap otherwise) and the bitmap kernel within the tests' bound, both dtypes."""
    from experiments import bench_spmm_unstructured as bu
    recs = bu.check_toy()
    assert recs and all(r["correct"] for r in recs)
    routes = {(r["dtype"], r["sparsity"], r["n"]): r["kernel"] for r in recs if r["kernel"].startswith("csr")}
    assert routes[("bfloat16", 0.9, 8)] == "csr auto (rows)" and routes[("float16", 0.5, 24)] == "csr auto (bitmap)"
    assert bu.EXPERIMENT.name == "spmm_unstructured"


def test_a_run_merged_into_an_earlier_record(tmp_path):
    """--merge: the points measured again replace the earlier record's in place, the others stay, new points follow;
    the commands accumulate, this run's facts win, and the written summary is the merged records'."""
    earlier = fabricated()
    bu.write(earlier, tmp_path / "old", command="first", bandwidth=4e12, stopped_by_budget=True)
    old = read_record(tmp_path / "old" / "spmm_unstructured.json", bu.RECORD_KEY, "spmm_unstructured")
    again = record(bu.BITMAP, 1.0, sparsity=0.9, n=8)
    new = record(bu.BITMAP, 2.0, sparsity=0.95, n=8)
    kept, facts = bu.merged(old, [again, new], dict(command="second", bandwidth=4.2e12, stopped_by_budget=False))
    at = next(i for i, r in enumerate(earlier) if (r["kernel"], r["sparsity"], r["n"], r["shape"])
              == (bu.BITMAP, 0.9, 8, "4096x4096"))
    assert kept[at] == again and kept[-1] == new and len(kept) == len(earlier) + 1
    assert kept[:at] + kept[at + 1:-1] == earlier[:at] + earlier[at + 1:]
    assert facts == dict(command=["first", "second"], bandwidth=4.2e12, stopped_by_budget=False)
    bu.write(kept, tmp_path / "merged", **facts)
    data = json.loads((tmp_path / "merged" / "spmm_unstructured.json").read_text())
    assert data["summary"] == bu.summarize(kept) and data["command"] == ["first", "second"]


def test_merge_refuses_what_is_not_an_earlier_record(tmp_path, capsys):
    (tmp_path / "list.json").write_text(json.dumps([{"shape": "1x1"}]))
    (tmp_path / "text.json").write_text("not json")
    for name in ("list.json", "text.json", "absent.json"):
        with pytest.raises(SystemExit):
            bu.parse(["--merge", str(tmp_path / name)])
        err = capsys.readouterr().err
        assert "--merge" in err and name in err
