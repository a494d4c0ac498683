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
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--help"])
    assert exc.value.code == 0
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
