"""sparsekit.launch on the simulator: every launch a product makes through gpu.launch.launch is observed
(kernel, grid, block, arguments), observers are removed afterwards, and record() falls back to the
ordinary path (no plan) where no driver function exists."""
from __future__ import annotations

import numpy as np
import pytest
from numba.cuda import config as cuda_config

from sparsekit.gpu import launch as launch_contract
from sparsekit.gpu.uspmm import uspmm
from sparsekit.reference.uspmm import uspmm as uspmm_ref
from sparsekit.formats import ELL
from sparsekit.launch import observe, record

pytestmark = pytest.mark.skipif(not cuda_config.ENABLE_CUDASIM, reason="simulator test (NUMBA_ENABLE_CUDASIM=1)")


def _ell(m=8, k=16, kept=4, seed=0):
    rng = np.random.default_rng(seed)
    idx = np.sort(np.stack([rng.choice(k, kept, replace=False) for _ in range(m)]), axis=1)
    vals = rng.standard_normal((m, kept)).astype(np.float32)
    return ELL(values=np.asfortranarray(vals), indices=np.asfortranarray(idx.astype(np.int32)), shape=(m, k))


def test_observe_sees_each_launch_and_detaches():
    ell = _ell()
    b = np.random.default_rng(1).standard_normal((16, 5)).astype(np.float32)
    with observe() as seen:
        c = uspmm(ell, b, variant="listing1")
    assert launch_contract.OBSERVERS == []
    np.testing.assert_allclose(c, uspmm_ref(ell, b), rtol=1e-5, atol=1e-5)
    assert len(seen) == 1
    kernel, grid, block, args = seen[0]
    assert block == 32 * 8 and grid == 1 and len(args) == 7         # vsize 8: a block of 8 warps, one tile


def test_record_without_driver_returns_the_product_and_no_plan():
    torch = pytest.importorskip("torch", reason="record() works on torch tensors (optional torch extra)")
    ell = _ell(seed=2)
    x = torch.randn(3, 16)
    out, plan = record(lambda t: torch.from_numpy(uspmm(ell, t.numpy().T.copy())), x, None)
    assert plan is None
    np.testing.assert_allclose(out.numpy(), uspmm_ref(ell, x.numpy().T.copy()), rtol=1e-5, atol=1e-5)
