"""The ``sparsekit`` command line: every command has --help, reproduce writes a report."""
from __future__ import annotations

import argparse
import re
import subprocess
import sys

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

    shared = {"integer", "fraction", "out_folder"}
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
