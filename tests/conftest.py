"""Shared pytest set-up: hypothesis profiles and the GPU skip."""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

# "ci": few, small examples (2 cores, simulator at ~0.4 ms per thread);
# "dev": more examples for local hunting. Deadlines are off: the simulator and
# first-call JIT compilation make single examples slow, which is not a bug.
settings.register_profile("ci", max_examples=15, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def _gpu_available() -> bool:
    if SIMULATOR:
        return False
    try:
        from numba import cuda
        return cuda.is_available()
    except Exception:  # no driver, no toolkit: no GPU
        return False


def pytest_collection_modifyitems(config, items):
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none found; kernels are checked on the simulator instead)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
