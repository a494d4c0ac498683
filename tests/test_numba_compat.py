"""sparsekit.numba_compat: the reviewed numba-cuda version is the installed one, another minor version warns once,
and a private attribute a numba-cuda release moved is an error naming it and the versions."""
from __future__ import annotations

import importlib
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


def _message_names_the_versions(err):
    text = str(err.value)
    assert importlib.metadata.version("numba-cuda") in text and f"{numba_compat.REVIEWED_NUMBA_CUDA}.x" in text


def test_a_missing_private_attribute_is_a_clear_error():
    """private() names the attribute, the installed numba-cuda and the reviewed version, instead of an
    AttributeError from deep inside a launch."""
    class Overload:
        pass

    with pytest.raises(numba_compat.NumbaInternalsError, match=r"Overload\._codelibrary") as err:
        numba_compat.kernel_function(Overload())
    _message_names_the_versions(err)


@pytest.mark.parametrize("module, name, use", [
    ("numba.cuda.compiler", "_compile_pyfunc_with_fixup",
     lambda: numba_compat.lto_library(lambda: None, (), None, (9, 0))),
    ("numba.cuda.cudadrv.driver", "_Linker", lambda: numba_compat.verbose_linker().__enter__()),
    ("numba.cuda.cudadrv.driver", "_to_core_stream", lambda: numba_compat.core_stream(0)),
])
def test_each_helper_fails_clearly_where_numba_cuda_moved_its_internal(monkeypatch, module, name, use):
    """Every helper reaches its private numba-cuda function through the guard: removed, it names it."""
    monkeypatch.delattr(importlib.import_module(module), name, raising=False)   # (the simulator has none)
    with pytest.raises(numba_compat.NumbaInternalsError, match=name) as err:
        use()
    _message_names_the_versions(err)

