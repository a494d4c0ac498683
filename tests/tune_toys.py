"""What the tests of the USpMM search share: a toy problem and a stand-in timer (timings on the simulator would mean
nothing), so that a search runs its plumbing there and its winner is known in advance."""
from __future__ import annotations

import numpy as np
import pytest

from sparsekit import tune

#: A toy problem: M x K, sparsity, N (a partial 8-column block: the kernels' edge paths).
M, K, SPARSITY, N = 32, 64, 0.5, 9


def toy_problem(dtype, order: str = "C", n: int = N, seed: int = 3, m: int = M, k: int = K):
    """An ``m x k`` ELL weight of ``dtype`` at :data:`SPARSITY` and a random ``k x n`` B in ``order``."""
    ell = tune.make_ell(m, k, SPARSITY, dtype, seed=seed)
    b = np.asarray(np.random.default_rng(seed).standard_normal((k, n)).astype(dtype), order=order)
    return ell, b


@pytest.fixture
def countdown(tmp_path, monkeypatch):
    """A private tune cache, the GPU check passed and a stand-in for ``sparsekit.timing.measure`` that runs the
    launch once and reports 1 us less than the call before: the last configuration timed wins. Yields the cache."""
    from sparsekit import timing

    path = tmp_path / "uspmm.json"
    monkeypatch.setenv("SPARSEKIT_TUNE_CACHE", str(path))
    monkeypatch.setattr(timing, "require_gpu", lambda what: None)
    calls = []

    def measure(launch, *, repeat=30, warmup=3, flush_l2=True, batch=1):
        launch()
        calls.append(launch)
        t = (1000 - len(calls)) * 1e-6
        return timing.Measurement(t, t, t, (t,), batch, warmup, flush_l2, 0.0, 0)

    monkeypatch.setattr(timing, "measure", measure)
    return path
