"""Tuning bfloat16 USpMM on a real GPU: B a ``torch.bfloat16`` tensor on the device, every configuration of the
search timed and correct, the winner cached under bfloat16's key and run by ``config="auto"``; ``sparsekit tune
--dtype bfloat16`` end to end (the same search on the simulator with a stand-in timer: tests/test_tune_bfloat16.py)."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from sparsekit import tune
from sparsekit.checks import BFLOAT16
from spmm_close import assert_half_close

pytestmark = [pytest.mark.gpu, pytest.mark.timing]


@pytest.fixture
def cuda_torch():
    """PyTorch with CUDA, which holds a bfloat16 B on the device (skip without it)."""
    torch = pytest.importorskip("torch", reason="a bfloat16 B stays on the device as a torch.bfloat16 tensor")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    return torch


def test_tune_command_bfloat16_end_to_end(tmp_path, cuda_torch):
    """``python -m sparsekit tune ... --dtype bfloat16``: exit 0, a table of correct configurations and one winner,
    cached under the bfloat16 key of the problem."""
    cache = tmp_path / "uspmm.json"
    argv = [sys.executable, "-m", "sparsekit", "tune", "--m", "1024", "--k", "1024", "--n", "16", "--sparsity", "0.8",
            "--dtype", "bfloat16"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, SPARSEKIT_TUNE_CACHE=str(cache)))
    print(run.stdout, run.stderr)
    assert run.returncode == 0, run.stderr
    [winner] = re.findall(r"^winner (\{.*\}) cached in ", run.stdout, re.M)
    header, _, *rows = [line.strip("|").split("|") for line in run.stdout.splitlines() if line.startswith("|")]
    correct = [cell.strip() for cell in header].index("correct")
    assert len(rows) == len(tune.space(BFLOAT16, "C")) and all(row[correct].strip() == "True" for row in rows)
    [(key, entry)] = json.loads(cache.read_text()).items()
    assert "|m=1024|k=1024|n=16|kprime=205|bfloat16|" in key and key.endswith("|C")
    assert ast.literal_eval(winner) == entry["config"] and entry["config"]["variant"] in {"decode", "bitmap",
                                                                                         "tensor_core"}


@pytest.mark.parametrize("n, order", [(16, "C"), (16, "F"), (128, "C")])
def test_tuned_bfloat16_winner_is_what_auto_runs(n, order, tmp_path, monkeypatch, cuda_torch):
    """Every configuration the kernels take is timed and correct (past N = 64 the decode and TiledBitmap kernels
    refuse, by name); ``uspmm(config="auto")`` then runs the winner: its result bit for bit, within the bound of the
    reference."""
    from sparsekit.arrays import torch_tensor, to_host
    from sparsekit.gpu.uspmm import prepare, resolved, uspmm
    from sparsekit.reference import uspmm as reference

    monkeypatch.setenv("SPARSEKIT_TUNE_CACHE", str(tmp_path / "uspmm.json"))
    ell = tune.make_ell(1024, 1024, 0.8, BFLOAT16, seed=1)
    winner, records = tune.tune(ell, n, order=order, repeat=5)
    timed = [r for r in records if "error" not in r]
    assert timed and all(r["correct"] and r["median_us"] > 0 for r in timed)
    refused = [r for r in records if "error" in r]
    assert {r["variant"] for r in refused} == ({"decode", "bitmap"} if n > 64 else set())
    dell = prepare(ell)
    assert resolved("auto", dell, n, order) == winner
    b_host = np.asarray(np.random.default_rng(2).standard_normal((1024, n)).astype(BFLOAT16), order=order)
    b = torch_tensor(b_host, cuda_torch).cuda()
    got = to_host(uspmm(dell, b, config="auto"))
    np.testing.assert_array_equal(got.view(np.uint16), to_host(uspmm(dell, b, **winner)).view(np.uint16))
    assert_half_close(np.ascontiguousarray(got), reference.uspmm(ell, np.ascontiguousarray(b_host)), ell.to_dense(),
                      b_host)
