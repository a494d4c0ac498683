"""Shared pytest set-up: hypothesis profiles, the GPU and simulator skips, failures named at once."""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from sparsekit.numba_patches import install_all

# "ci": few, small examples (2 cores, simulator at ~0.4 ms per thread);
# "dev": more examples for local hunting. Deadlines are off: the simulator and
# first-call JIT compilation make single examples slow, which is not a bug.
settings.register_profile("ci", max_examples=15, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
# The library's reviewed numba-cuda replacements, before any test compiles or simulates a kernel (under the
# simulator: a block manager that sleeps until its threads need it, shared arrays found without a walk of the
# stack); SPARSEKIT_NUMBA_PATCHES=0 keeps numba-cuda's own code here as everywhere.
install_all()


def _gpu_available() -> bool:
    if SIMULATOR:
        return False
    try:
        from numba import cuda
        return cuda.is_available()
    except Exception:  # no driver, no toolkit: no GPU
        return False


def pytest_collection_modifyitems(config, items):
    """Without a GPU, ``gpu`` tests skip; with one, ``simulator`` tests do (each names its GPU counterpart).

    The tests outside ``tests/gpu`` run their kernels on whichever backend the process has: the simulator
    in CI, the GPU on a GPU machine, where the same properties must hold."""
    on_gpu = _gpu_available()
    unexplained = [item.nodeid for item in items
                   if (mark := item.get_closest_marker("simulator")) and not mark.args]
    if unexplained:              # checked on every backend, so CI finds what would break the GPU run's skips
        raise pytest.UsageError("simulator marks need a reason naming the GPU test that covers them: "
                                + ", ".join(unexplained))
    for item in items:
        if on_gpu and (mark := item.get_closest_marker("simulator")):
            item.add_marker(pytest.mark.skip(reason="runs without a GPU only: " + mark.args[0]))
        elif not on_gpu and "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(
                reason="needs a CUDA GPU (none found; kernels are checked on the simulator instead)"))


class _NameFailuresAtOnce:
    """Prints ``FAILED <test id> (phase): <error line>`` the moment a test fails: pytest's summary and
    tracebacks come only at the end, and a run stopped by a time limit never prints them. Under xdist this
    runs in the controlling process."""

    def __init__(self, config):
        self.config = config

    def pytest_runtest_logreport(self, report):
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if report.failed and reporter is not None:
            crash = getattr(report.longrepr, "reprcrash", None)
            why = f": {crash.message.splitlines()[0][:300]}" if crash is not None and crash.message else ""
            reporter.write(f"\nFAILED {report.nodeid} ({report.when}){why}\n", red=True)


def pytest_configure(config):
    config.pluginmanager.register(_NameFailuresAtOnce(config), "name-failures-at-once")
