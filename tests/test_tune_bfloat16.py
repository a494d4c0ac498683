"""Tuning bfloat16 USpMM: the search holds only the kernels that take bfloat16 (each equal to the reference), a tuned
winner is cached under bfloat16's own key and served by ``config="auto"``, and ``sparsekit tune --dtype bfloat16``
runs the search, refusing in one line where it cannot. The searches here run with a stand-in timer (timings on the
simulator would mean nothing); tests/gpu/test_tune_bfloat16_gpu.py times them on a GPU."""
from __future__ import annotations

import ast
import json
import re

import numpy as np
import pytest

from sparsekit import cli, router, tune, tune_cache
from sparsekit.bench.uspmm import config_name
from sparsekit.checks import BFLOAT16
from sparsekit.reference import uspmm as reference
from spmm_close import assert_half_close
from tune_toys import K, M, N, SPARSITY, countdown, toy_problem  # noqa: F401 (countdown: a fixture)

F16 = np.dtype(np.float16)

# --- the space ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("full", [False, True], ids=["default", "full"])
def test_the_bfloat16_space_is_its_three_kernels(full):
    """Row-major B: the decode kernel, the TiledBitmap kernel's settings and float16's tensor-core settings (the
    router gives bfloat16 float16's: the same kernel with the bf16 MMA); column-major B: the first two (the
    tensor-core kernel takes a row-major B only). Every entry is a winner the cache keeps."""
    rows = [dict(variant="decode")] + tune.bitmap_configs(full)
    c, f = tune.space(BFLOAT16, "C", full=full), tune.space(BFLOAT16, "F", full=full)
    assert c == rows + [tune.tensor_core(**cfg) for cfg in tune.TC_SETTINGS[F16]]
    assert f == rows
    assert all(router.Config.valid(cfg) for cfg in c)
    assert tune.tensor_core(**tune.TC_LARGE[F16]) in c and router.TC_DEFAULT.tunables() in c
    assert tune.space(F16, "C", full=full) != c                  # float16's own CUDA-core kernels are not bfloat16's


@pytest.mark.parametrize("order", ["C", "F"])
def test_every_bfloat16_configuration_equals_the_reference(order):
    """Each configuration of the bfloat16 space runs through ``uspmm`` and equals the NumPy reference within float32
    accumulation and one rounding to bfloat16, in B's memory order."""
    from sparsekit.gpu.uspmm import prepare, uspmm
    ell, b = toy_problem(BFLOAT16, order)
    dell = prepare(ell)
    want = reference.uspmm(ell, b)
    for cfg in tune.space(BFLOAT16, order):
        got = uspmm(dell, b, **cfg)
        assert got.dtype == BFLOAT16 and (got.flags.f_contiguous if order == "F" else got.flags.c_contiguous), \
            config_name(cfg)
        assert_half_close(got, want, ell.to_dense(), b)


# --- the search and the cache -----------------------------------------------------------------------------------------

@pytest.mark.simulator("the search's plumbing with a stand-in timer; on a GPU, tests/gpu/test_tune_bfloat16_gpu.py")
def test_tune_caches_bfloat16s_winner_under_its_own_key_and_auto_runs_it(countdown):
    """The search runs every configuration (all correct), stores the winner under the bfloat16 key only, and
    ``uspmm(config="auto")`` then runs it: here the last one timed, a tensor-core setting where the router would
    pick the decode kernel. The float16 weight of the same shape keeps the router's choice."""
    from sparsekit.gpu.uspmm import prepare, resolved, uspmm
    ell, b = toy_problem(BFLOAT16)
    space = tune.space(BFLOAT16, "C")
    assert router.heuristic(M, K, N, ell.kprime, BFLOAT16, "C") in space          # (so nothing is added)
    winner, records = tune.tune(ell, N, repeat=1)
    assert [{key: r[key] for key in cfg} for r, cfg in zip(records, space)] == space
    assert all(r["correct"] and "error" not in r for r in records)
    assert winner == space[-1] and winner["variant"] == "tensor_core"
    [key] = json.loads(countdown.read_text())
    assert f"|m={M}|k={K}|n={N}|kprime={ell.kprime}|bfloat16|" in key
    dell = prepare(ell)
    assert tune_cache.lookup(dell, N, "C") == winner and resolved("auto", dell, N, "C") == winner
    got = uspmm(dell, b, config="auto")
    np.testing.assert_array_equal(got.view(np.uint16), uspmm(dell, b, **winner).view(np.uint16))
    assert_half_close(got, reference.uspmm(ell, b), ell.to_dense(), b)
    f16 = prepare(tune.make_ell(M, K, SPARSITY, F16, seed=3))
    assert tune_cache.lookup(f16, N, "C") is None
    assert resolved("auto", f16, N, "C") == router.heuristic(M, K, N, f16.host.kprime, F16, "C")


@pytest.mark.simulator("the search's plumbing with a stand-in timer; on a GPU, tests/gpu/test_tune_bfloat16_gpu.py")
def test_tune_of_a_column_major_bfloat16_b_searches_the_row_kernels(countdown):
    """Column-major B: the decode kernel and the TiledBitmap kernel's settings (their linear forms), the winner (the
    last timed) cached under order F."""
    ell, _ = toy_problem(BFLOAT16, "F")
    winner, records = tune.tune(ell, N, order="F", repeat=1)
    bitmaps = tune.bitmap_configs()
    assert [r["variant"] for r in records] == ["decode"] + ["bitmap"] * len(bitmaps)
    assert all(r["correct"] for r in records)
    assert winner == bitmaps[-1]
    [key] = json.loads(countdown.read_text())
    assert key.endswith("|bfloat16|int32|F")


@pytest.mark.simulator("the search's plumbing with a stand-in timer; on a GPU, tests/gpu/test_tune_bfloat16_gpu.py")
def test_tune_past_n_64_records_the_row_kernels_refusals_and_runs_the_tensor_cores(countdown):
    """Row-major B of 72 columns: the decode and TiledBitmap kernels refuse it by name (recorded, never a winner),
    every tensor-core setting runs and agrees."""
    ell, _ = toy_problem(BFLOAT16, n=72)
    winner, records = tune.tune(ell, 72, repeat=1)
    refused = [r for r in records if "error" in r]
    assert {r["variant"] for r in refused} == {"decode", "bitmap"} and all("N = 72" in r["error"] for r in refused)
    ran = [r for r in records if "error" not in r]
    assert len(ran) == len(tune.TC_SETTINGS[BFLOAT16]) and all(r["correct"] for r in ran)
    assert winner["variant"] == "tensor_core"


@pytest.mark.simulator("the search's plumbing with a stand-in timer; on a GPU, tests/gpu/test_tune_bfloat16_gpu.py")
def test_tune_refuses_by_name_what_no_bfloat16_kernel_takes(countdown):
    """A column-major bfloat16 B past N = 64: both kernels refuse it, the search says why and stores nothing."""
    ell, _ = toy_problem(BFLOAT16, "F")
    with pytest.raises(ValueError, match=r"no configuration ran 32 x 64 bfloat16 times a 64 x 72 B in order 'F': "
                                         r"b: N = 72 with the decode kernel \(N <= 64\)"):
        tune.tune(ell, 72, order="F", repeat=1)
    assert not countdown.exists()


# --- the command --------------------------------------------------------------------------------------------------

@pytest.mark.simulator("the command's plumbing with a stand-in timer; on a GPU, tests/gpu/test_tune_bfloat16_gpu.py")
def test_tune_command_searches_bfloat16(countdown, monkeypatch, capsys):
    """``sparsekit tune --dtype bfloat16`` runs the search (exit 0), prints its table and caches the winner it names."""
    from sparsekit.commands import uspmm as command
    monkeypatch.setattr(command, "_need_gpu", lambda what: True)
    argv = ["tune", "--m", str(M), "--k", str(K), "--n", str(N), "--sparsity", str(SPARSITY), "--dtype", "bfloat16",
            "--repeat", "1"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    [entry] = json.loads(countdown.read_text()).values()
    [(winner, path)] = re.findall(r"^winner (\{.*\}) cached in (.*)$", out, re.M)
    assert ast.literal_eval(winner) == entry["config"] and path == str(countdown)
    header, _, *rows = [line.strip("|").split("|") for line in out.splitlines() if line.startswith("|")]
    correct = [cell.strip() for cell in header].index("correct")
    assert len(rows) == len(tune.space(BFLOAT16, "C")) and all(row[correct].strip() == "True" for row in rows)


@pytest.mark.simulator("the command's plumbing with a stand-in timer; on a GPU, tests/gpu/test_tune_bfloat16_gpu.py")
def test_tune_command_refuses_a_bfloat16_problem_no_kernel_takes_in_one_line(countdown, monkeypatch, capsys):
    from sparsekit.commands import uspmm as command
    monkeypatch.setattr(command, "_need_gpu", lambda what: True)
    assert cli.main(["tune", "--m", str(M), "--k", str(K), "--n", "72", "--sparsity", str(SPARSITY),
                     "--dtype", "bfloat16", "--order", "F"]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparsekit tune: no configuration ran"), lines


def test_tune_command_refuses_bfloat16_without_pytorch_in_one_line(monkeypatch, capsys):
    """Where B cannot stay on the device as a ``torch.bfloat16`` tensor (no PyTorch with CUDA), one line says so."""
    from sparsekit.bench import uspmm as bench
    from sparsekit.commands import uspmm as command
    monkeypatch.setattr(command, "_need_gpu", lambda what: True)
    monkeypatch.setattr(bench, "bfloat16_b_on_device", lambda: False)
    assert cli.main(["tune", "--m", "32", "--k", "32", "--n", "8", "--sparsity", "0.5", "--dtype", "bfloat16"]) == 2
    assert capsys.readouterr().out.splitlines() == [
        "sparsekit tune: --dtype bfloat16 needs PyTorch with CUDA (B stays on the device as a torch.bfloat16 "
        "tensor: Numba has no bfloat16 arrays)"]
