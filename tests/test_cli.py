"""The ``sparsekit`` command line: every command has --help, reproduce writes a report, a bad flag or flags
that imply more host memory than is available are one line (exit status 2)."""
from __future__ import annotations

import argparse
import re
import subprocess
import sys

import numpy as np
import pytest

from sparsekit import cli
from sparsekit.device import info


def _subcommands(parser: argparse.ArgumentParser, prefix=()):
    """Yield the argv prefix of every (nested) sub-command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from _subcommands(sub, (*prefix, name))


def test_top_level_commands_present():
    names = {c[0] for c in _subcommands(cli.build_parser())}
    assert {"info", "reproduce", "bench"} <= names


@pytest.mark.parametrize("argv", [()] + list(_subcommands(cli.build_parser())), ids=" ".join)
def test_every_command_has_help(argv, capsys):
    assert cli.main([*argv, "--help"]) == 0
    assert "usage: sparsekit" in capsys.readouterr().out


def test_python_dash_m_runs_the_command():
    """``python -m sparsekit`` is the ``sparsekit`` command (where the console script is not on PATH)."""
    out = subprocess.run([sys.executable, "-m", "sparsekit", "--help"], capture_output=True, text=True, check=True)
    assert "usage: sparsekit" in out.stdout


def test_reproduce_list_names_every_experiment(capsys):
    from sparsekit.experiment import discover

    assert cli.main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    for name in discover():
        assert name in out


def test_reproduce_outside_a_source_checkout_says_so(monkeypatch, capsys):
    """The experiments package is a repository folder, not installed: without it, one clear line, status 2."""
    from sparsekit import experiment

    monkeypatch.setitem(sys.modules, "experiments", None)     # what an installed copy alone sees
    with pytest.raises(experiment.NotASourceCheckout, match="runs from a source checkout"):
        experiment.discover()
    assert cli.main(["reproduce", "--list"]) == 2
    assert "runs from a source checkout" in capsys.readouterr().err


def test_reproduce_rejects_unknown_experiment(tmp_path, capsys):
    assert cli.main(["reproduce", "--only", "no_such_experiment", "--out", str(tmp_path)]) == 2
    assert "unknown experiment" in capsys.readouterr().err


def test_info_reports_backend(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("backend: ")
    assert "numba" in out


def test_reproduce_quick_writes_report_csv_and_figure(tmp_path, capsys):
    assert cli.main(["reproduce", "--quick", "--only", "formats", "--out", str(tmp_path)]) == 0
    assert re.search(r"^\[reproduce\] formats: [0-9.]+ s$", capsys.readouterr().err, re.M)  # time per experiment
    report = (tmp_path / "REPORT.md").read_text()
    assert report.startswith("# sparsekit reproduce report")
    backend = info().backend
    if backend == "simulator":
        assert "simulator" in report.splitlines()[2]    # the no-GPU notice is at the top
    assert f"- backend: {backend} (" in report
    assert "## Storage of each sparse format against dense" in report
    assert (tmp_path / "formats" / "format_bytes.png").stat().st_size > 0
    csvs = list((tmp_path / "formats").glob("*.csv"))
    assert csvs and all("correct" in p.read_text().splitlines()[0] for p in csvs if "bytes_by" in p.name)
    assert "False" not in (tmp_path / "formats" / "bytes_by_format_and_sparsity.csv").read_text()


def test_gpu_probe_that_hangs_counts_as_no_gpu(monkeypatch):
    """A hung driver must not hang every command: the probe is killed after its timeout."""
    import time

    from sparsekit import backend

    monkeypatch.setattr(backend, "PROBE", "import time; time.sleep(60)")
    start = time.perf_counter()
    with pytest.warns(RuntimeWarning, match="no answer within 0.5 s"):
        assert backend.gpu_present(timeout=0.5) is False
    assert time.perf_counter() - start < 10


def _options(parser: argparse.ArgumentParser, prefix=()):
    """Yield (argv prefix, action) for every option of every (nested) command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, (*prefix, name))
        elif action.option_strings:
            yield prefix, action


def test_every_typed_flag_uses_a_shared_validating_type():
    """A bare ``type=int``/``type=float`` lets 0, -1 or nan through to NumPy: every typed flag parses with
    :mod:`sparsekit.cli_types`."""
    from sparsekit import cli_types

    shared = {"integer", "fraction", "out_folder", "matrix_shape", "record_file", "names"}
    typed = [(" ".join(prefix), action.dest, action.type) for prefix, action in _options(cli.build_parser())
             if action.type is not None]
    assert typed, "no typed flag found"
    bare = [(cmd, dest) for cmd, dest, kind in typed if kind in (int, float)]
    assert bare == []
    assert all(kind.__module__ == cli_types.__name__ and kind.__name__ in shared for _, _, kind in typed), typed


BAD_FLAGS = [
    (["bench", "spmm", "--problem", "1", "--repeat", "0"], "--repeat", "must be an integer >= 1, got '0'"),
    (["bench", "spmm", "--problem", "21"], "--problem", "must be an integer >= 1 and <= 20, got '21'"),
    (["bench", "spmm", "--problem", "1", "--n", "-3"], "--n", "got '-3'"),
    (["bench", "spmm", "--problem", "1", "--seed", "-1"], "--seed", "must be an integer >= 0, got '-1'"),
    (["bench", "spmm", "--problem", "1", "--sparsity", "-1"], "--sparsity", r"must lie in [0, 1), got '-1'"),
    (["bench", "spmm", "--problem", "1", "--sparsity", "nan"], "--sparsity", "got 'nan'"),
    (["bench", "spmm", "--problem", "1", "--sparsity", "1"], "--sparsity", "got '1'"),
    (["bench", "sparsify24", "--m", "33"], "--m", "must be an integer >= 32 and a multiple of 32, got '33'"),
    (["bench", "sparsify24", "--m", "0"], "--m", "got '0'"),
    (["bench", "sparsify24", "--k", "x"], "--k", "got 'x'"),
    (["bench", "sparsify24", "--seed", "-1"], "--seed", "got '-1'"),
    (["bench", "sparsify24", "--repeat", "0"], "--repeat", "got '0'"),
    (["bench", "uspmm", "--m", "0", "--k", "8", "--n", "8", "--sparsity", "0.5"], "--m", "got '0'"),
    (["bench", "uspmm", "--m", "8", "--k", "8", "--n", "8", "--sparsity", "inf"], "--sparsity", "got 'inf'"),
    (["tune", "--m", "8", "--k", "8", "--n", "8", "--sparsity", "0.5", "--repeat", "-2"], "--repeat", "got '-2'"),
    (["roofline", "--model", "resnet50", "--sparsity", "nan"], "--sparsity", r"must lie in [0, 1], got 'nan'"),
    (["roofline", "--model", "resnet50", "--batch", "0"], "--batch", "got '0'"),
    (["reproduce", "--seed", "-1"], "--seed", "got '-1'"),
    (["bench", "uspmm-decode", "--sparsity", "0.5", "1.5"], "--sparsity", "got '1.5'"),
    (["bench", "uspmm-decode", "--shapes", "4096x0"], "--shapes", "got '4096x0'"),
]


@pytest.mark.parametrize("argv, flag, message", BAD_FLAGS, ids=[" ".join(a) for a, _, _ in BAD_FLAGS])
def test_bad_flag_is_one_line_naming_the_flag(argv, flag, message, capsys):
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert f"argument {flag}: " in lines[0] and message in lines[0], lines[0]


def test_reproduce_out_that_is_a_file_is_refused(tmp_path, capsys):
    existing = tmp_path / "REPORT.md"
    existing.write_text("keep me")
    assert cli.main(["reproduce", "--only", "formats", "--out", str(existing)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "argument --out: " in err[0] and "exists and is not a folder" in err[0]
    assert existing.read_text() == "keep me"


def test_reproduce_out_under_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert cli.main(["reproduce", "--only", "formats", "--out", str(tmp_path / "file" / "out")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("--out: cannot make the folder"), err


def test_bench_spmm_unreadable_matrix_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.mtx"
    bad.write_text("%%MatrixMarket matrix coordinate real general\n2 3 1\n1 1 nan\n")
    assert cli.main(["bench", "spmm", "--matrix", str(bad), "--cpu-only"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "values must be finite" in err[0], err


def test_cli_types_doctests():
    import doctest

    from sparsekit import cli_types

    result = doctest.testmod(cli_types)
    assert result.attempted > 0 and result.failed == 0


# ------------------------------------------------------------------------- host memory a command's flags imply

def _parsers(parser: argparse.ArgumentParser, prefix=()):
    """Yield (argv prefix, parser) for every (nested) command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from _parsers(sub, (*prefix, name))


def test_every_command_with_matrix_sides_declares_its_host_memory():
    """A command taking a matrix side (``--m``, ``--k``, ``--n``) declares the host memory they imply, so that
    sides each within MAX_SIDE cannot multiply past the machine unchecked."""
    from sparsekit import cli_types

    sided = {" ".join(argv): sub for argv, sub in _parsers(cli.build_parser())
             if {"m", "k", "n"} & {a.dest for a in sub._actions if a.option_strings}}
    assert set(sided) == {"bench spmm", "bench sparsify24", "bench uspmm", "tune"}
    for name, sub in sided.items():
        assert isinstance(sub.get_default("host_memory"), cli_types.HostMemory), name


def _available(monkeypatch, nbytes: int) -> None:
    """The memory available, as the commands see it, set to ``nbytes`` (nothing is allocated)."""
    from sparsekit import cli_types

    monkeypatch.setattr(cli_types, "available_host_bytes", lambda: (nbytes, "stated by the test"))


HOST_MEMORY = [
    (["bench", "uspmm", "--m", "1024", "--k", "1024", "--n", "512", "--sparsity", "0.5"],
     "--m 1024 --k 1024 --n 512 --sparsity 0.5 --dtype float32"),
    (["tune", "--m", "1024", "--k", "2048", "--n", "256", "--sparsity", "0.9", "--dtype", "float16"],
     "--m 1024 --k 2048 --n 256 --sparsity 0.9 --dtype float16"),
    (["bench", "uspmm", "--m", "2048", "--k", "1024", "--n", "64", "--sparsity", "0.8", "--dtype", "bfloat16"],
     "--m 2048 --k 1024 --n 64 --sparsity 0.8 --dtype bfloat16"),
    (["bench", "sparsify24", "--m", "4096", "--k", "1024"], "--m 4096 --k 1024"),
    (["bench", "spmm", "--problem", "11", "--n", "4096", "--cpu-only"],
     "--problem 11 --n 4096 --sparsity 0.9 --dtype float32"),
    (["bench", "spmm", "--problem", "11", "--n", "4096", "--dtype", "bfloat16"],
     "--problem 11 --n 4096 --sparsity 0.9 --dtype bfloat16"),
]


@pytest.mark.parametrize("argv, flags", HOST_MEMORY, ids=[" ".join(a[:2]) for a, _ in HOST_MEMORY])
def test_flags_past_the_host_memory_are_one_line_before_anything_runs(argv, flags, monkeypatch, capsys):
    _available(monkeypatch, 2**20)
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""                                     # the handler never ran
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    prog = "sparsekit " + " ".join(argv[:2] if argv[0] == "bench" else argv[:1])
    assert lines[0].startswith(f"{prog}: error: {flags} need about "), lines[0]
    assert lines[0].endswith("of host memory, more than the 1.0 MiB available (stated by the test)"), lines[0]


@pytest.mark.parametrize("argv, flags", HOST_MEMORY, ids=[" ".join(a[:2]) for a, _ in HOST_MEMORY])
def test_flags_within_the_host_memory_pass(argv, flags, monkeypatch):
    """The same flags pass with 64 GiB available (checked alone: the commands themselves need a GPU)."""
    _available(monkeypatch, 2**36)
    args = cli.build_parser().parse_args(argv)
    args.host_memory.check(args)


def test_bench_spmm_matrix_past_the_host_memory_is_one_line(tmp_path, monkeypatch, capsys):
    """A ``--matrix`` file's shape is known once it is read: checked then, before its dense copy is made."""
    from sparsekit import io
    from sparsekit.formats import CSR

    path = tmp_path / "layer.smtx"
    io.write_smtx(path, CSR.from_dense(np.eye(40, 30)))
    _available(monkeypatch, 1000)
    assert cli.main(["bench", "spmm", "--matrix", str(path), "--n", "16", "--cpu-only"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"sparsekit bench spmm: error: --matrix {path} (40x30, nnz 30) --n 16 --dtype float32 need about 79.9 KiB of "
        "host memory, more than the 1000 B available (stated by the test)"]


def test_available_host_bytes_reads_meminfo_else_sysconf(tmp_path, monkeypatch):
    from sparsekit import cli_types

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384 kB\nMemFree:         1024 kB\nMemAvailable:    2048 kB\n")
    monkeypatch.setattr(cli_types, "MEMINFO", meminfo)
    assert cli_types.available_host_bytes() == (2048 * 1024, f"MemAvailable in {meminfo}")
    meminfo.write_text("MemTotal:       16384 kB\n")                 # an older kernel: no MemAvailable
    pages = {"SC_PHYS_PAGES": 1000, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(cli_types.os, "sysconf", pages.__getitem__)
    assert cli_types.available_host_bytes() == (4096000, "physical memory (os.sysconf)")
    monkeypatch.setattr(cli_types, "MEMINFO", tmp_path / "absent")
    assert cli_types.available_host_bytes() == (4096000, "physical memory (os.sysconf)")


def _traced_peak(run) -> int:
    """The most bytes NumPy arrays held at once while ``run()`` ran (tracemalloc sees NumPy's allocations)."""
    import tracemalloc

    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _spmm_run(m, k, n):
    from sparsekit.bench.spmm import bench_cpu_matrix, host_bytes, suite_matrix

    def run():
        bench_cpu_matrix(*suite_matrix(m, k, n, 0.9), repeat=1, tune=False)
    return run, host_bytes(m, k, n, round(0.1 * m * k))


def _spmm_half_run(m, k, n, sparsity, dtype):
    from sparsekit.bench.spmm import HalfCheck, half_problem, host_bytes, suite_matrix
    from sparsekit.formats import TiledBitmap, TiledCSL

    def run():                    # bench_gpu_half's host side: the 16-bit problem, the formats, a checked result
        csr, b, _ = suite_matrix(m, k, n, sparsity)
        csr16, b16 = half_problem(csr, b, dtype)
        formats = TiledBitmap.from_csr(csr16), TiledCSL.from_csr(csr16, tile=TiledCSL.row_tile(k))
        HalfCheck(csr16.to_dense(), b16)(np.zeros((m, n), b16.dtype))
        return formats
    return run, host_bytes(m, k, n, round((1 - sparsity) * m * k), dtype)


def _uspmm_run(m, k, n, sparsity, dtype):
    from sparsekit.bench.uspmm import Problem, host_bytes, spmm_launches
    from sparsekit.arrays import to_host

    def run():                    # bench_problem's host side: the problem, the CSR baseline, a checked result
        p = Problem(m, k, n, sparsity, dtype)
        spmm_launches(p)
        p.correct(to_host(np.zeros((m, n), dtype)))
    return run, host_bytes(m, k, n, sparsity, dtype)


def _sparsify24_run(m, k):
    from sparsekit.bench.sparsify24 import host_bytes, kept_magnitude

    def run():                    # what ``bench sparsify24`` does on the host
        kept_magnitude(np.random.default_rng(0).standard_normal((m, k)).astype(np.float16))
    return run, host_bytes(m, k)


@pytest.mark.parametrize("case", [
    (_spmm_run, (512, 512, 64)), (_spmm_run, (64, 512, 512)), (_spmm_run, (512, 64, 512)),
    (_spmm_half_run, (512, 512, 64, 0.9, "bfloat16")), (_spmm_half_run, (64, 512, 512, 0.5, "float16")),
    (_spmm_half_run, (512, 64, 512, 0.9, "float16")), (_spmm_half_run, (256, 512, 16, 0.0, "bfloat16")),
    (_uspmm_run, (512, 512, 64, 0.0, "float32")), (_uspmm_run, (64, 512, 512, 0.6, "float16")),
    (_uspmm_run, (512, 64, 512, 0.9, "float32")), (_uspmm_run, (64, 512, 512, 0.6, "bfloat16")),
    (_sparsify24_run, (256, 512)), (_sparsify24_run, (64, 2048)),
], ids=lambda case: f"{case[0].__name__[1:-4]} {case[1]}")
def test_host_memory_estimate_bounds_the_measured_peak(case):
    """Each estimate the commands check is at least the host memory the benchmark holds at its peak (measured
    with tracemalloc after a small warm-up run, which compiles), and at most 2.5 times it (a refusal is not
    grossly early)."""
    make, sizes = case
    warm, _ = make(*(min(s, 32) if isinstance(s, int) else s for s in sizes))
    warm()
    run, estimate = make(*sizes)
    peak = _traced_peak(run)
    assert peak <= estimate <= 2.5 * peak, (peak, estimate)


# ------------------------------------------------------------------------------------------- bfloat16 USpMM

def _stand_in_measure(launch, *, repeat=30, warmup=3, flush_l2=True, batch=1):
    """A stand-in for sparsekit.timing.measure on the simulator: run once, report 10 us."""
    from sparsekit.timing import Measurement

    launch()
    return Measurement(1e-5, 1e-5, 1e-5, (1e-5,), batch, warmup, flush_l2, 0.0, 0)


@pytest.mark.simulator("the command's plumbing with a stand-in timer; on a GPU, "
                       "tests/gpu/test_bench_uspmm_bfloat16_gpu.py times it")
@pytest.mark.parametrize("n, routed", [(8, "decode"), (72, "tensor_core")])
def test_bench_uspmm_bfloat16_at_toy_size(n, routed, monkeypatch, capsys):
    """``bench uspmm --dtype bfloat16`` end to end: the bfloat16 problem, only the kernels that take bfloat16, each
    result within the exact product's bound; past the decode kernel's N = 64 it is n/a with the reason, and auto
    runs the tensor-core kernel."""
    from sparsekit import timing
    from sparsekit.commands import uspmm as command

    monkeypatch.setattr(command, "_need_gpu", lambda what: True)
    monkeypatch.setattr(timing, "measure", _stand_in_measure)
    argv = ["bench", "uspmm", "--m", "32", "--k", "32", "--n", str(n), "--sparsity", "0.5", "--dtype", "bfloat16",
            "--repeat", "1"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(f"| 32 | 32 | {n} | 0.5 | bfloat16 |")]
    ran = {row.split(" | ")[5]: row for row in rows if row.endswith("| True |")}
    assert {"tensor cores", "heuristic", "auto"} <= set(ran)
    assert not any(row.endswith("| False |") for row in rows)
    assert f"auto ran: {routed}" in out
    decode_refused = "decode: n/a, ValueError: b: N = 72 with the decode kernel (N <= 64)"
    if n <= 64:
        assert {"decode", "decode B col-major"} <= set(ran) and decode_refused not in out
    else:
        assert decode_refused in out
    assert not any(name.startswith(("USpMM", "pipelined", "direct", "dense tile")) for name in ran)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_tf32_weights_refuses_half_dtypes_in_one_line(dtype, capsys):
    assert cli.main(["bench", "uspmm", "--m", "32", "--k", "32", "--n", "8", "--sparsity", "0.5", "--dtype", dtype,
                     "--tf32-weights"]) == 2
    assert capsys.readouterr().out.splitlines() == [
        "--tf32-weights: float32 weights only (the float16 and bfloat16 kernels have no TF32 split), "
        f"got --dtype {dtype}"]


def test_host_memory_of_bfloat16_is_float16s():
    """bfloat16 takes 2 bytes an element like float16: the same host-memory estimate, for both commands."""
    from sparsekit.bench.uspmm import host_bytes
    from sparsekit.commands.uspmm import _tune_host_bytes

    sides = (1024, 2048, 64, 0.8)
    assert host_bytes(*sides, "bfloat16") == host_bytes(*sides, "float16") < host_bytes(*sides, "float32")
    args = {dtype: argparse.Namespace(m=1024, k=2048, n=64, dtype=dtype) for dtype in ("float16", "bfloat16")}
    assert _tune_host_bytes(args["bfloat16"]) == _tune_host_bytes(args["float16"])


def test_bfloat16_correct_is_float16s_bound_at_bfloat16s_roundoff():
    """``Problem.correct`` for bfloat16: float32 accumulation (K' roundings of 2**-24) and one rounding to bfloat16
    (unit roundoff 2**-8): float32 sums of the bfloat16 operands rounded once pass; a result off by 2**-6 of the
    largest output does not."""
    from sparsekit.bench.uspmm import Problem
    from sparsekit.checks import BFLOAT16
    from sparsekit.reference import uspmm as reference

    p = Problem(24, 40, 8, 0.5, "bfloat16", seed=3)
    assert p.dtype == BFLOAT16 and p.ell.dtype == BFLOAT16 and p.b_host.dtype == BFLOAT16
    want = reference.uspmm(p.ell, p.b_host)
    assert want.dtype == BFLOAT16 and p.correct(want)
    exact, _ = p.exact()
    worst = np.unravel_index(np.argmax(np.abs(exact)), exact.shape)
    off = want.astype(np.float64)
    off[worst] += 2.0 ** -6 * abs(exact[worst])
    assert not p.correct(off.astype(np.float32))


@pytest.mark.parametrize("order", ["C", "F"])
def test_bfloat16_goes_to_torch_and_back_bit_for_bit(order):
    """The benchmark hands bfloat16 operands to PyTorch and reads its results back through the bits, no copy in,
    strides kept (``torch.from_numpy`` does not know ``ml_dtypes.bfloat16``)."""
    torch = pytest.importorskip("torch", reason="PyTorch (an optional extra) gives the vendor baselines")
    from sparsekit.arrays import to_host, torch_tensor
    from sparsekit.checks import BFLOAT16

    x = np.asarray(np.random.default_rng(0).standard_normal((5, 7)).astype(BFLOAT16), order=order)
    t = torch_tensor(x, torch)
    assert t.dtype == torch.bfloat16 and t.stride() == tuple(s // x.itemsize for s in x.strides)
    assert t.data_ptr() == x.ctypes.data                                       # a view: no copy
    np.testing.assert_array_equal(t.float().numpy(), x.astype(np.float32))
    back = to_host(t)
    assert back.dtype == BFLOAT16 and np.array_equal(back.view(np.uint16), x.view(np.uint16))
