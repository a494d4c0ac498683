"""Offline compile checks (no GPU, no driver).

docs/numba_notes.md: a kernel that calls a device function or an ``@overload``
helper asks ``get_current_device().compute_capability`` while compiling, which
fails without a driver. The ``offline_device`` fixture answers for it.
"""
from __future__ import annotations

import os

import pytest

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


class _FakeDevice:
    compute_capability = (9, 0)


@pytest.fixture(autouse=True)
def offline_device(monkeypatch):
    import numba.cuda.dispatcher as dispatcher
    monkeypatch.setattr(dispatcher, "get_current_device", lambda: _FakeDevice())
    yield


#: Seconds each module took on the 2-core test machine without xdist. ``sparsekit.testsuite
#: compile`` runs every module on one worker (``--dist loadfile``: a module's tests share their builds, the
#: sm_80 and sm_90 cases one front end) and hands the modules out in collection order, so the longest go
#: first and the short ones fill in at the end. A module not listed (new) goes first: it may be long.
MODULE_SECONDS = {"test_persistent_rnn_compile.py": 174, "test_uspmm_tc_compile.py": 120,
                  "test_uspmm_compile.py": 113, "test_sparsify24_compile.py": 60, "test_spmm_compile.py": 25,
                  "test_uspmm_wgmma_compile.py": 31,
                  "test_persistent_rnn_shfl_compile.py": 15, "test_spmm_lessons_compile.py": 11,
                  "test_offline.py": 5, "test_numba_patches.py": 2, "test_timing_compile.py": 0.3, "test_toolchain.py": 0.1}


def pytest_collection_modifyitems(config, items):
    # stable: the tests of a module keep their order
    items.sort(key=lambda item: -MODULE_SECONDS.get(os.path.basename(str(item.fspath)), float("inf")))
    for item in items:
        if str(item.fspath).startswith(os.path.dirname(__file__)):
            item.add_marker(pytest.mark.compile)
            if SIMULATOR:
                item.add_marker(pytest.mark.skip(
                    reason="compile checks need the simulator off (python -m sparsekit.testsuite compile)"))
