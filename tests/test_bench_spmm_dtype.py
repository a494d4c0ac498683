"""``sparsekit bench spmm --dtype``: the flag, its refusals, the 16-bit problem and check, and the half-precision GPU
records (``sparsekit.bench.spmm.bench_gpu_half``) on the CUDA simulator with a stand-in timer; the same command
on a GPU: tests/gpu/test_bench_spmm_half_gpu.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sparsekit import cli
from sparsekit.bench import spmm as bench
from sparsekit.checks import BFLOAT16

NPDTYPES = {"float16": np.dtype(np.float16), "bfloat16": BFLOAT16}
OURS = ("spmm_bitmap", "spmm_tiled row kernel")
BANDWIDTH = 4e12                     # bytes/s stated for the bandwidth share (the simulator measures none)
SECONDS = (2e-6, 1e-6, 3e-6)         # what the stand-in timer reports: median, p10, p90


def _stand_in_timer(launch):
    """A stand-in for :func:`sparsekit.bench.spmm.device_timer` on the simulator: run once, report SECONDS."""
    launch()
    return SECONDS


def _stand_in_measure(launch, *, repeat=30, warmup=3, flush_l2=True, batch=1):
    """A stand-in for sparsekit.timing.measure on the simulator: run once, report SECONDS."""
    from sparsekit.timing import Measurement

    launch()
    return Measurement(*SECONDS, (SECONDS[0],), batch, warmup, flush_l2, 0.0, 0)


def _one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


# ----------------------------------------------------------------------------------------------------- the flag

def test_dtype_defaults_to_float32_and_takes_the_16_bit_dtypes():
    parse = cli.build_parser().parse_args
    assert parse(["bench", "spmm", "--problem", "11"]).dtype == "float32"
    for dtype in ("float32", "float16", "bfloat16"):
        assert parse(["bench", "spmm", "--problem", "11", "--dtype", dtype]).dtype == dtype


def test_dtype_choices_are_float32_and_the_benchmarks_16_bit_dtypes():
    from sparsekit.commands import spmm as command

    assert command.DTYPES == ("float32", *bench.HALF_DTYPES)


@pytest.mark.parametrize("value", ["float64", "fp16", "bf16", ""])
def test_bad_dtype_is_one_line_naming_the_flag(value, capsys):
    assert cli.main(["bench", "spmm", "--problem", "1", "--dtype", value]) == 2
    line = _one_line_error(capsys)
    assert "argument --dtype: invalid choice: " in line and "'float32', 'float16', 'bfloat16'" in line, line


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_with_cpu_only_is_one_line(dtype, capsys):
    assert cli.main(["bench", "spmm", "--problem", "11", "--dtype", dtype, "--cpu-only"]) == 2
    assert _one_line_error(capsys) == (
        f"sparsekit bench spmm: error: --dtype {dtype} with --cpu-only: the CPU kernels, scipy and BLAS take "
        f"float32; drop --cpu-only to time the GPU kernels in {dtype}, or use --dtype float32")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_without_a_gpu_is_one_line(dtype, monkeypatch, capsys):
    from sparsekit import backend

    monkeypatch.setattr(backend, "choose_backend", lambda: "simulator")
    assert cli.main(["bench", "spmm", "--problem", "11", "--dtype", dtype]) == 2
    assert _one_line_error(capsys) == (
        f"sparsekit bench spmm: error: --dtype {dtype} times the GPU kernels only (the CPU kernels take float32) "
        "and no CUDA GPU was found (the CUDA simulator says nothing about speed)")


def test_bfloat16_on_a_gpu_without_torch_is_one_line(monkeypatch, capsys):
    from sparsekit import backend
    from sparsekit.bench import uspmm

    monkeypatch.setattr(backend, "choose_backend", lambda: "gpu")
    monkeypatch.setattr(uspmm, "bfloat16_b_on_device", lambda: False)
    assert cli.main(["bench", "spmm", "--problem", "11", "--dtype", "bfloat16"]) == 2
    assert _one_line_error(capsys) == (
        "sparsekit bench spmm: error: --dtype bfloat16 needs PyTorch with CUDA: B stays on the device as a "
        "torch.bfloat16 tensor (Numba has no bfloat16 arrays)")


def test_matrix_past_float16s_range_is_one_line(tmp_path, monkeypatch, capsys):
    """A ``.mtx`` value past float16's 65504 would round to inf: refused before anything runs."""
    from sparsekit import backend

    path = tmp_path / "big.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real general\n2 3 2\n1 1 1.5\n2 3 1e5\n")
    monkeypatch.setattr(backend, "choose_backend", lambda: "gpu")
    assert cli.main(["bench", "spmm", "--matrix", str(path), "--n", "8", "--dtype", "float16"]) == 2
    assert _one_line_error(capsys) == (
        "sparsekit bench spmm: error: the matrix has values past float16's range (largest |value| 100000); "
        "scale it, or keep float32")


# ------------------------------------------------------------------------------------ the 16-bit problem, check

@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_problem_rounds_the_values_and_b_and_keeps_the_pattern(dtype):
    csr, b, a = bench.suite_matrix(24, 40, 8, 0.7)
    csr16, b16 = bench.half_problem(csr, b, dtype)
    assert csr16.dtype == NPDTYPES[dtype] and b16.dtype == NPDTYPES[dtype]
    assert np.array_equal(csr16.indptr, csr.indptr) and np.array_equal(csr16.indices, csr.indices)
    assert np.array_equal(csr16.data.view(np.uint16), csr.data.astype(NPDTYPES[dtype]).view(np.uint16))
    assert np.array_equal(b16.view(np.uint16), b.astype(NPDTYPES[dtype]).view(np.uint16))
    assert np.array_equal(csr16.to_dense().astype(np.float32), a.astype(NPDTYPES[dtype]).astype(np.float32))


def test_half_problem_refuses_float32_and_values_past_the_range():
    csr, b, _ = bench.suite_matrix(8, 8, 4, 0.5)
    with pytest.raises(ValueError, match=r"dtype: must be one of \('float16', 'bfloat16'\), got 'float32'"):
        bench.half_problem(csr, b, "float32")
    with pytest.raises(ValueError, match=r"B has values past float16's range \(largest \|value\| 70000\)"):
        bench.half_problem(csr, np.full_like(b, 7e4), "float16")
    bench.half_problem(csr, np.full_like(b, 7e4), "bfloat16")          # bfloat16 spans float32's range


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_check_takes_one_rounding_and_refuses_more(dtype):
    """The float64 product of the 16-bit operands rounded once to the dtype (``reference.spmm``) is within the
    bound; off by 4 machine epsilons of the largest output it is not."""
    from sparsekit.reference.spmm import spmm_csr

    csr16, b16 = bench.half_problem(*bench.suite_matrix(24, 40, 8, 0.5)[:2], dtype)
    check = bench.HalfCheck(csr16.to_dense(), b16)
    want = spmm_csr(csr16, b16)
    assert want.dtype == NPDTYPES[dtype] and check(want)
    off = want.astype(np.float32)
    worst = np.unravel_index(np.argmax(np.abs(off)), off.shape)
    off[worst] += 4 * bench.ROUNDING[dtype] * abs(off[worst])
    assert not check(off.astype(NPDTYPES[dtype]))


def test_error_bound_is_the_same_on_numpy_and_torch():
    """The experiments check PyTorch tensors with the bound the command checks NumPy arrays with."""
    torch = pytest.importorskip("torch", reason="PyTorch (an optional extra) is what the experiments check with")
    rng = np.random.default_rng(1)
    x32 = rng.standard_normal((6, 40)).astype(BFLOAT16).astype(np.float32)
    w32 = rng.standard_normal((9, 40)).astype(BFLOAT16).astype(np.float32)
    ref, bound = bench.error_bound(x32, w32, "bfloat16")
    tref, tbound = bench.error_bound(torch.from_numpy(x32), torch.from_numpy(w32), "bfloat16")
    np.testing.assert_allclose(tref.numpy(), ref, rtol=1e-6)       # float32 sums, each library its own order
    np.testing.assert_allclose(tbound.numpy(), bound, rtol=1e-6)


def test_host_memory_of_a_16_bit_problem():
    """Both 16-bit dtypes hold the same host memory; float32's estimate is unchanged by the new argument (the
    tracemalloc bounds of each: tests/test_cli.py)."""
    sides = (512, 1024, 64, 52429)
    assert bench.host_bytes(*sides, "bfloat16") == bench.host_bytes(*sides, "float16")
    assert bench.host_bytes(*sides) == bench.host_bytes(*sides, "float32") == 32 * 512 * 1024 + 24 * 1024 * 64 \
        + 48 * 512 * 64 + 40 * 52429


# ------------------------------------------------------------------------------- the records, on the simulator

def _route_format(csr16, route: str):
    """The format ``spmm_csr``'s ``route`` reads, built here from the CSR as the brief of each kernel says."""
    from sparsekit.formats import ELL, TiledBitmap, TiledCSL

    return {"rows": lambda: TiledCSL.from_csr(csr16, tile=TiledCSL.row_tile(csr16.shape[1])),
            "bitmap": lambda: TiledBitmap.from_csr(csr16), "ell": lambda: ELL.padded_from_csr(csr16),
            "staged": lambda: csr16}[route]()


@pytest.mark.simulator("the half-precision records with a stand-in timer; on a GPU, "
                       "tests/gpu/test_bench_spmm_half_gpu.py times them")
@pytest.mark.parametrize("dtype, n, sparsity, route", [
    ("bfloat16", 8, 0.9, "rows"), ("float16", 16, 0.5, "bitmap"), ("bfloat16", 72, 0.8, "staged"),
    ("float16", 72, 0.5, "ell")])
def test_bench_gpu_half_records_on_the_simulator(dtype, n, sparsity, route):
    """Every provider has a record: ours correct and timed, with the bytes of its format and their share of the
    bandwidth; ``spmm_csr`` names ``auto_route``'s route; a kernel past its MAX_N and a PyTorch baseline PyTorch
    cannot run say why, with no time."""
    from sparsekit.arrays import cuda_torch
    from sparsekit.formats import CSR
    from sparsekit.gpu import spmm as gs
    from sparsekit.gpu import spmm_bitmap as gb
    from sparsekit.gpu import spmm_tiled as gt

    csr16, b16 = bench.half_problem(*bench.suite_matrix(32, 64, n, sparsity)[:2], dtype)
    assert gs.auto_route(gs.prepare(csr16, CSR), n) == route
    recs = {r["provider"]: r for r in bench.bench_gpu_half(csr16, b16, timer=_stand_in_timer, bandwidth=BANDWIDTH)}
    auto = f"spmm_csr auto (route: {route})"
    assert list(recs) == [auto, *OURS, bench.DENSE, bench.CUSPARSE]
    formats = {auto: route, "spmm_bitmap": "bitmap", "spmm_tiled row kernel": "rows"}
    names = {"rows": "TiledCSL 1x64", "bitmap": "TiledBitmap", "ell": "ELL (rows padded)", "staged": "CSR"}
    for name, fmt in formats.items():
        rec = recs[name]
        assert rec["format"] == names[fmt]
        if name != auto and n > 64:
            kernel = gb if fmt == "bitmap" else gt
            assert rec["reason"] == f"N = {n} past {kernel.__name__}.MAX_N = 64"
            assert rec["correct"] is None and math.isnan(rec["us"]) and rec["weight_bytes"] is None
            continue
        nbytes = _route_format(csr16, fmt).nbytes().total
        assert rec["correct"] is True and rec["reason"] == ""
        assert (rec["us"], rec["p10_us"], rec["p90_us"]) == pytest.approx([s * 1e6 for s in SECONDS])
        assert rec["weight_bytes"] == nbytes
        assert rec["pct_bandwidth"] == pytest.approx(100 * nbytes / SECONDS[0] / BANDWIDTH)
    if cuda_torch() is None:
        for name in (bench.DENSE, bench.CUSPARSE):
            assert recs[name]["reason"] == "needs PyTorch with CUDA" and recs[name]["correct"] is None
        assert all(math.isnan(r["speedup_vs_dense"]) for r in recs.values())


@pytest.mark.simulator("a provider that fails or errs, with a stand-in timer; on a GPU, "
                       "tests/gpu/test_bench_spmm_half_gpu.py checks the exit status")
def test_a_wrong_or_failing_provider_is_recorded_not_hidden():
    """A result off the bound reads ``correct`` False; one that raises reads False with its error and no time;
    speedups are over the dense provider's time."""
    csr16, b16 = bench.half_problem(*bench.suite_matrix(16, 32, 8, 0.5)[:2], "bfloat16")
    right = (csr16.to_dense().astype(np.float64) @ b16.astype(np.float64)).astype(BFLOAT16)

    def fails():
        raise RuntimeError("launch failed")

    providers = {bench.DENSE: bench.HalfProvider(lambda: right, 2 * 16 * 32, "dense"),
                 "wrong": bench.HalfProvider(lambda: (right.astype(np.float32) + 1).astype(BFLOAT16), 100, "x"),
                 "fails": bench.HalfProvider(fails, 100, "x")}
    timings = iter([(4e-6,) * 3, (1e-6,) * 3])
    recs = {r["provider"]: r for r in bench.bench_gpu_half(
        csr16, b16, timer=lambda launch: next(timings), providers=providers, bandwidth=BANDWIDTH)}
    assert recs[bench.DENSE]["correct"] is True and recs[bench.DENSE]["speedup_vs_dense"] == 1.0
    assert recs["wrong"]["correct"] is False and recs["wrong"]["speedup_vs_dense"] == pytest.approx(4.0)
    assert recs["fails"]["correct"] is False and recs["fails"]["reason"] == "RuntimeError: launch failed"
    assert math.isnan(recs["fails"]["us"])


def test_exit_status_fails_on_our_kernels_only():
    """Ours off the bound or failed: exit status 1; a baseline off the bound (cuSPARSE's 16-bit sums) is reported
    and the status stays 0; a provider that did not run (``correct`` None) is no failure."""
    def rec(provider, correct):
        return {"provider": provider, "correct": correct}

    baselines = [rec(bench.DENSE, True), rec(bench.CUSPARSE, False)]
    assert bench.half_exit_status([rec("spmm_bitmap", True), rec("spmm_tiled row kernel", None), *baselines]) == 0
    assert bench.half_exit_status([rec("spmm_bitmap", False), *baselines]) == 1
    assert bench.half_exit_status([rec("spmm_bitmap", True), rec(bench.DENSE, False)]) == 0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_baselines_in_the_dtype(dtype):
    """The PyTorch baselines (here on PyTorch's CPU, where its sparse CSR product refuses 16-bit values): dense in
    the dtype is correct with ``2 M K`` bytes; cuSPARSE CSR is timed with its values, int64 indices and row
    pointers counted, or, where PyTorch refuses the dtype, says so with PyTorch's reason."""
    torch = pytest.importorskip("torch", reason="PyTorch (an optional extra) gives the dense and cuSPARSE baselines")
    csr16, b16 = bench.half_problem(*bench.suite_matrix(24, 40, 8, 0.7)[:2], dtype)
    providers = bench.torch_half_providers(csr16, csr16.to_dense(), b16, torch, device="cpu")
    recs = {r["provider"]: r for r in bench.bench_gpu_half(csr16, b16, timer=_stand_in_timer, providers=providers,
                                                           bandwidth=BANDWIDTH)}
    assert list(recs) == [bench.DENSE, bench.CUSPARSE]
    dense = recs[bench.DENSE]
    assert dense["correct"] is True and dense["weight_bytes"] == 2 * 24 * 40 and dense["speedup_vs_dense"] == 1.0
    sparse = recs[bench.CUSPARSE]
    if sparse["reason"]:
        assert sparse["reason"].startswith("PyTorch refuses: ") and sparse["correct"] is None
    else:
        assert sparse["correct"] is True and sparse["weight_bytes"] == csr16.nnz * (2 + 8) + (24 + 1) * 8


@pytest.mark.simulator("the command's plumbing with a stand-in timer; on a GPU, "
                       "tests/gpu/test_bench_spmm_half_gpu.py runs it")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_bench_spmm_half_command_on_the_simulator(dtype, tmp_path, monkeypatch, capsys):
    """``bench spmm --matrix FILE --dtype D`` end to end: the one CPU line, then a row per provider, ours correct."""
    from sparsekit import backend, io, timing
    from sparsekit.formats import CSR

    rng = np.random.default_rng(0)
    path = tmp_path / "layer.smtx"
    io.write_smtx(path, CSR.from_dense(np.where(rng.random((40, 48)) < 0.2, 1.0, 0.0)))
    monkeypatch.setattr(backend, "choose_backend", lambda: "gpu")
    monkeypatch.setattr(timing, "measure", _stand_in_measure)
    monkeypatch.setattr(timing, "measured_bandwidth", lambda: BANDWIDTH)
    assert cli.main(["bench", "spmm", "--matrix", str(path), "--n", "8", "--dtype", dtype, "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert f"CPU: not timed in {dtype} (the CPU kernels, scipy and BLAS take float32)." in out
    assert "of the 4.00 TB/s copy bandwidth" in out
    rows = {line.split(" | ")[0][2:]: line for line in out.splitlines() if line.startswith("| ") and " | " in line}
    for name in ("spmm_csr auto (route: rows)", *OURS):
        assert rows[name].startswith(f"| {name} | TiledCSL 1x64 | 2 | 1 | 3 |" if "bitmap" not in name
                                     else f"| {name} | TiledBitmap | 2 | 1 | 3 |")
        assert rows[name].endswith("| True |  |")
