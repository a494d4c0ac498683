"""Tuning the TiledBitmap kernel's launch on a real GPU, at a decode shape where it is routed (4096 x 4096, 80 %,
N = 16): every setting of the search timed and correct, the winner (rows, slices, stages as it ran) cached and what
``config="auto"`` runs, bit for bit. The same plumbing on the simulator: tests/test_tune_bitmap.py."""
from __future__ import annotations

import numpy as np
import pytest

from sparsekit import router, tune
from sparsekit.arrays import cuda_torch, half_b_on_device, to_host
from sparsekit.bench.uspmm import config_name
from sparsekit.checks import BFLOAT16
from spmm_close import assert_half_close

pytestmark = [pytest.mark.gpu, pytest.mark.timing]


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BFLOAT16], ids=lambda d: d.name)
def test_tuned_bitmap_launch_is_what_auto_runs(dtype, tmp_path, monkeypatch):
    from sparsekit.gpu.uspmm import prepare, resolved, uspmm
    from sparsekit.reference import uspmm as reference

    if dtype == BFLOAT16 and cuda_torch() is None:
        pytest.skip("a bfloat16 B stays on the device as a torch.bfloat16 tensor: PyTorch with CUDA needed")
    monkeypatch.setenv("SPARSEKIT_TUNE_CACHE", str(tmp_path / "uspmm.json"))
    m = k = 4096
    n = 16
    ell = tune.make_ell(m, k, 0.8, dtype, seed=1)
    assert router.heuristic(m, k, n, ell.kprime, dtype, "C") == router.BITMAP.tunables()
    configs = tune.bitmap_configs()
    winner, records = tune.tune(ell, n, configs=configs, repeat=10)
    for cfg, r in zip(configs, records):
        print(f"{dtype.name} {config_name(cfg):36s} {r.get('median_us', r.get('error'))}")
    assert all(r["correct"] and r["median_us"] > 0 for r in records)
    assert winner in configs
    dell = prepare(ell)
    assert resolved("auto", dell, n, "C") == winner
    b_host = np.random.default_rng(2).standard_normal((k, n)).astype(dtype)
    b = half_b_on_device(b_host)
    got = to_host(uspmm(dell, b, config="auto"))
    np.testing.assert_array_equal(got.view(np.uint16), to_host(uspmm(dell, b, **winner)).view(np.uint16))
    assert_half_close(got, reference.uspmm(ell, b_host), ell.to_dense(), b_host)
