"""Offline compile checks (no GPU, no driver).

NUMBA_NOTES.md: a kernel that calls a device function or an ``@overload``
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


def pytest_collection_modifyitems(config, items):
    # a module kept on one worker (``xdist_group``, ``--dist loadgroup``) goes first: started last, it was
    # the run's tail with the other worker idle
    items.sort(key=lambda item: item.get_closest_marker("xdist_group") is None)
    for item in items:
        if str(item.fspath).startswith(os.path.dirname(__file__)):
            item.add_marker(pytest.mark.compile)
            if SIMULATOR:
                item.add_marker(pytest.mark.skip(
                    reason="compile checks need the simulator off (python -m sparsekit.testsuite compile)"))
