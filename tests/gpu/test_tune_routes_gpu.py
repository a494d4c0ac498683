"""``uspmm(..., config="auto")`` on a real GPU: the router's choice for this device, resolved once per weight, N and
order, bit-identical to the same tunables passed by hand; the host time of both is printed (speed is a benchmark's
business: ``experiments/bench_uspmm_dispatch.py``)."""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

#: (M, K, N, sparsity, dtype, order): one problem per kind of route on a compute capability 9.0 GPU (wgmma one
#: wave, tensor cores, CUDA cores, warp split, decode, Listing 1 for a column-major B).
PROBLEMS = [(1024, 1024, 1024, 0.6, "float32", "C"), (1024, 1024, 1024, 0.6, "float16", "C"),
            (1024, 1024, 1024, 0.95, "float32", "C"), (512, 1024, 128, 0.81, "float32", "C"),
            (1024, 1024, 8, 0.8, "bfloat16", "C"), (512, 512, 64, 0.7, "float32", "F")]


def _problem(m, k, n, sparsity, dtype, order):
    from numba import cuda

    from sparsekit.gpu.uspmm import prepare
    from sparsekit.checks import BFLOAT16
    from sparsekit.tune import make_ell
    dtype = BFLOAT16 if dtype == "bfloat16" else np.dtype(dtype)
    ell = make_ell(m, k, sparsity, dtype)
    b = np.asarray(np.random.default_rng(1).standard_normal((k, n)).astype(dtype), order=order)
    # Numba has no bfloat16 device arrays: a bfloat16 B goes in from the host (uspmm copies its bits).
    return ell, prepare(ell), b if dtype == BFLOAT16 else cuda.to_device(b)


def _host(c) -> np.ndarray:
    return c.copy_to_host() if hasattr(c, "copy_to_host") else c


@pytest.mark.parametrize("m,k,n,sparsity,dtype,order", PROBLEMS, ids=str)
def test_auto_runs_the_routed_setting_once_resolved(m, k, n, sparsity, dtype, order, tmp_path, monkeypatch):
    import sparsekit.gpu.uspmm as gu
    from sparsekit.gpu.uspmm_wgmma import supported
    from sparsekit.router import heuristic
    from sparsekit.timing import dispatch_overhead
    monkeypatch.setenv("SPARSEKIT_TUNE_CACHE", str(tmp_path / "uspmm.json"))     # no tuned winner: the router
    ell, dell, b = _problem(m, k, n, sparsity, dtype, order)
    want = heuristic(m, k, n, ell.kprime, dell.dtype, order, wgmma=supported())
    calls = []
    real = gu.resolve
    monkeypatch.setattr(gu, "resolve", lambda *args, **kw: calls.append(args[2:4]) or real(*args, **kw))
    got = _host(gu.uspmm(dell, b, config="auto"))
    assert gu.resolved("auto", dell, n, order) == want
    by_hand = _host(gu.uspmm(dell, b, **want))
    assert (np.ascontiguousarray(got).view(np.uint8) == np.ascontiguousarray(by_hand).view(np.uint8)).all()
    auto_s = dispatch_overhead(lambda: gu.uspmm(dell, b, config="auto"))
    hand_s = dispatch_overhead(lambda: gu.uspmm(dell, b, **want))
    assert calls == [(n, order)]
    print(f"{want['variant']}: host time auto {auto_s * 1e6:.1f} us, by hand {hand_s * 1e6:.1f} us")   # (a record, not a target)
