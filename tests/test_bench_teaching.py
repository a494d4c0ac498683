"""The teaching benchmarks (``sparsekit.bench.spmm`` and the sweeps of ``experiments/bench_teaching.py``) and
experiment run at toy size (so they never rot), and say `correct`."""
from __future__ import annotations

import numpy as np
import pytest

from experiments import bench_teaching as bt
from sparsekit.bench.spmm import Checker, bench_gpu_problem, suite_matrix


def test_cpu_benchmarks_at_toy_size():
    for rec in bt.bench_cpu_suite(bt.suite_problems(quick=True), repeat=1):
        assert rec["correct"] and rec["speedup_vs_scipy"] > 0 and rec["threads"] >= 1
    loop = bt.bench_loop_orders(64, 64, 32, 0.9, repeat=1)
    assert all(r["correct"] for r in loop)
    assert {r["kernel"] for r in loop} >= {"rowwise", "inner", "colwise", "outer", "scipy.sparse csr @ dense"}
    for rec in bt.bench_cpu_conv(quick=True, repeat=1):
        assert rec["im2col+SpMM correct"] and rec["virtual im2col correct"] and rec["im2col+dense BLAS correct"]


def test_suite_matrix_is_magnitude_pruned_and_seeded():
    csr, b, a = suite_matrix(64, 32, 8, 0.9)
    assert csr.nnz == round(0.1 * 64 * 32) and b.shape == (32, 8)
    assert np.array_equal(csr.to_dense(), a)
    again, _, _ = suite_matrix(64, 32, 8, 0.9)
    assert np.array_equal(again.data, csr.data)


def test_checker_catches_a_wrong_result():
    _, b, a = suite_matrix(16, 16, 4, 0.5)
    check = Checker(a, b)
    good = (a.astype(np.float64) @ b).astype(np.float32)
    assert check(good)
    bad = good.copy()
    bad[3, 2] += 1e-3 * (1 + abs(bad[3, 2]))
    assert not check(bad)


def test_teaching_experiment_quick(tmp_path):
    from experiments.teaching import EXPERIMENT
    from sparsekit.experiment import Context

    sec = EXPERIMENT.run(Context(quick=True, backend="simulator", out_dir=tmp_path))
    assert len(sec.tables) == 5 and all(t.records for t in sec.tables)
    for name in sec.figures:
        assert (tmp_path / name).stat().st_size > 0
    table = sec.tables[0].records
    assert all(r[f"{a} predicted"] == r[f"{a} simulated"] for r in table for a in "ABC")


def test_bench_spmm_command_on_an_smtx_file(tmp_path, capsys):
    from sparsekit import cli, io
    from sparsekit.formats import CSR

    rng = np.random.default_rng(0)
    path = tmp_path / "layer.smtx"
    io.write_smtx(path, CSR.from_dense(np.where(rng.random((40, 30)) < 0.2, 1.0, 0.0)))
    assert cli.main(["bench", "spmm", "--matrix", str(path), "--n", "16", "--repeat", "1", "--cpu-only"]) == 0
    out = capsys.readouterr().out
    assert "layer.smtx 40x30" in out and "| True |" in out
    assert cli.main(["bench", "spmm", "--problem", "99", "--cpu-only"]) == 2


def _one_microsecond(launch):
    """A stand-in for sparsekit.timing.measure on the simulator: run once, report 1 us."""
    launch()
    return 1e-6, 1e-6, 1e-6


@pytest.mark.simulator("the GPU benchmark's plumbing with a stand-in timer; on a GPU, "
                       "experiments/bench_teaching.py gpu times it")
def test_gpu_benchmark_plumbing_on_the_simulator():
    # 8 rows (20 took 17 s, two thirds of it step 7's block per row); 36 columns of B: a partial tile
    # (each lesson's kernel is checked against the reference over drawn shapes in tests/test_spmm_lessons.py)
    csr, b, a = suite_matrix(8, 24, 36, 0.8)
    recs = bench_gpu_problem(csr, b, a, tune=False, timer=_one_microsecond)
    assert recs and all(r["correct"] for r in recs)
    row = bt.summarize_gpu((11, 8, 24, 36, "NLP", 0.8), recs)
    assert row["all_correct"] and row["best_us"] == pytest.approx(1.0)


@pytest.mark.simulator("the GPU sweep's plumbing with a stand-in timer; on a GPU, "
                       "experiments/bench_teaching.py gpu-sweep times it")
def test_gpu_sweep_plumbing_on_the_simulator(monkeypatch):
    grid = bt.split_configs(8)
    assert len(grid) == 32 and all(kw["vector"] in (1, 4) for kw in grid.values())
    assert all(kw["vector"] == 1 for kw in bt.split_configs(49).values())
    one = {"staged": dict(warps_per_row=2, warps_per_block=2, vector=4)}
    monkeypatch.setattr(bt, "split_configs", lambda n: one)      # one configuration: simulator time
    problems = bt._selected([(1, 6, 40, 8, "toy", 0.7), (2, 4, 4, 4, "toy", 0.5)], "2,1")
    assert [p[0] for p in problems] == [2, 1]
    recs = bt.sweep_gpu(problems[1:], timer=_one_microsecond)
    assert {r["provider"] for r in recs} >= {"staged", "7 row_split wpr=2", "4 warp_per_row_swizzled", bt.DEFAULT_CALL}
    assert [r["default_over_best"] for r in recs if "default_over_best" in r] == [1.0]   # every provider 1 us
    assert all(r["correct"] for r in recs)


@pytest.mark.simulator("the default-check's plumbing with a stand-in timer; on a GPU, "
                       "experiments/bench_teaching.py default-check times it")
def test_default_check_plumbing_on_the_simulator(monkeypatch):
    sweep = [{"problem": 1, "provider": name, "us": us, "correct": ok} for name, us, ok in (
        (bt.DEFAULT_CALL, 0.5, True), ("gpu.spmm csr swizzle cpl=4", 0.1, False),
        ("gpu.spmm staged wpr=2 wpb=4 vec=4 cpl=2", 0.9, True), ("4 warp_per_row_swizzled", 0.2, True))]
    assert bt.best_swept_csr(sweep, 1) == "gpu.spmm staged wpr=2 wpb=4 vec=4 cpl=2"    # ours, explicit, correct
    assert bt.best_swept_csr(sweep, 2) is None
    one = {"gpu.spmm staged wpr=2 wpb=4 vec=4 cpl=2": dict(swizzle=True, warps_per_row=2, warps_per_block=4,
                                                           vector=4, cols_per_lane=2)}
    monkeypatch.setattr(bt, "split_configs", lambda n: one)      # one configuration: simulator time
    rows, detail = bt.check_defaults([(1, 8, 16, 8, "toy", 0.5), (2, 8, 8, 4, "toy", 0.75)],
                                     timer=_one_microsecond, sweep=sweep)
    assert [r["csr_best_known"] for r in rows] == ["staged wpr=2 wpb=4 vec=4 cpl=2", "staged (staged_tunables)"]
    assert all(r["all_correct"] for r in rows) and all(r["correct"] for r in detail)
    assert {r["provider"] for r in detail} == {bt.COO_AUTO, bt.COO_OWN, bt.BELL_AUTO, bt.BELL_OWN, bt.DEFAULT_CALL,
                                               "gpu.spmm staged wpr=2 wpb=4 vec=4 cpl=2",
                                               "gpu.spmm staged (staged_tunables)"}
    for key in ("coo", "bell", "csr"):                           # every call 1 us
        assert [r[f"{key}_default_over_best"] for r in rows] == [1.0, 1.0]
    assert all(r["coo_convert_ms"] > 0 and r["bell_convert_ms"] > 0 for r in rows)
