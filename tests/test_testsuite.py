"""``sparsekit.testsuite``: the commands ``./dev test`` runs (workers, BLAS threads, parts), without running them."""
from __future__ import annotations

import subprocess

import pytest

from sparsekit import testsuite


@pytest.fixture
def launched(monkeypatch):
    """The (command, environment) of every subprocess the suite would start; no GPU."""
    calls = []

    def run(cmd, env):
        calls.append((cmd, env))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(testsuite.subprocess, "run", run)
    monkeypatch.setattr(testsuite, "gpu_present", lambda: False)
    for var in ("SPARSEKIT_TEST_WORKERS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    return calls


def _workers(cmd):
    return cmd[cmd.index("-n") + 1]


def test_simulator_part_runs_one_worker_more_than_cores_with_one_blas_thread_each(launched):
    assert testsuite.main(["sim"]) == 0
    [(cmd, env)] = launched
    assert _workers(cmd) == str(testsuite._cores() + 1) and testsuite._cores() >= 1
    assert env["NUMBA_ENABLE_CUDASIM"] == "1" and env["HYPOTHESIS_PROFILE"] == "ci"
    assert all(env[v] == "1" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"))
    assert "--ignore=tests/compile" in cmd and "not compile" in cmd


def test_compile_part_runs_one_worker_per_core_by_module(launched):
    assert testsuite.main(["compile", "-x"]) == 0
    [(cmd, env)] = launched
    assert _workers(cmd) == "auto" and "loadfile" in cmd and cmd[-1] == "-x"
    assert "NUMBA_ENABLE_CUDASIM" not in env and env["OMP_NUM_THREADS"] == "1"


def test_the_environment_chooses_workers_and_threads(launched, monkeypatch):
    monkeypatch.setenv("SPARSEKIT_TEST_WORKERS", "5")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    testsuite.main(["sim"])
    testsuite.main(["compile"])
    assert [_workers(cmd) for cmd, _ in launched] == ["5", "5"]
    assert all(env["OMP_NUM_THREADS"] == "3" for _, env in launched)


def test_unknown_part_prints_the_usage(launched, capsys):
    assert testsuite.main(["everything"]) == 2 and not launched
    assert "compile" in capsys.readouterr().out
