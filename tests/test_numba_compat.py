"""sparsekit.numba_compat: the reviewed numba-cuda version is the installed one, and another minor version warns once."""
from __future__ import annotations

import importlib.metadata
import warnings

import pytest

from sparsekit import numba_compat


def test_installed_numba_cuda_is_the_reviewed_minor_version():
    assert numba_compat.is_reviewed_version(importlib.metadata.version("numba-cuda"))


@pytest.mark.parametrize("version, reviewed", [("0.30.0", True), ("0.30.4", True), ("0.31.0", False),
                                               ("0.3.0", False), ("1.30.4", False)])
def test_is_reviewed_version_compares_the_minor_version(version, reviewed):
    assert numba_compat.is_reviewed_version(version) is reviewed


def test_another_minor_version_warns_once(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.31.2")
    numba_compat.check_version.cache_clear()
    try:
        with pytest.warns(numba_compat.UnreviewedNumbaWarning, match="0.31.2"):
            numba_compat.check_version()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            numba_compat.check_version()
    finally:
        numba_compat.check_version.cache_clear()
