"""The private numba-cuda attributes sparsekit relies on, reached in one place and checked against the reviewed
version.

numba-cuda has no public way to get a compiled kernel's driver function (needed to set its shared-memory
attribute, launch it with cluster dimensions, or replay it through the driver), to compile a kernel for a
target other than the current device with link-time optimisation, or to ask ptxas for its verbose report, so
these helpers use private functions and attributes that may move between releases. ``pyproject.toml`` bounds numba-cuda below the next minor version
and a different minor version warns once (:class:`UnreviewedNumbaWarning`). The faster replacements of
numba-cuda functions are :mod:`sparsekit.numba_patches` and :mod:`sparsekit.simulator`.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import warnings

#: The numba-cuda minor version whose internals these helpers were reviewed against.
REVIEWED_NUMBA_CUDA = "0.30"


class UnreviewedNumbaWarning(RuntimeWarning):
    """The installed numba-cuda is not the reviewed minor version: its private attributes may have moved."""


def is_reviewed_version(version: str) -> bool:
    """Whether numba-cuda ``version`` (``"0.30.4"``) is of the reviewed minor version."""
    return version.split(".")[:2] == REVIEWED_NUMBA_CUDA.split(".")


@functools.cache
def check_version() -> None:
    """Warn once when the installed numba-cuda is not of :data:`REVIEWED_NUMBA_CUDA`."""
    version = importlib.metadata.version("numba-cuda")
    if not is_reviewed_version(version):
        warnings.warn(f"numba-cuda {version} is not the reviewed {REVIEWED_NUMBA_CUDA}.x: the private attributes "
                      "sparsekit.numba_compat reads may have moved", UnreviewedNumbaWarning, stacklevel=3)


def kernel_function(compiled):
    """The driver function of a compiled kernel (one entry of ``kernel.overloads``): ``.handle`` is its
    CUkernel, ``.kernel`` what ``cuLaunchKernelEx`` takes."""
    check_version()
    return compiled._codelibrary.get_cufunc()


def lto_library(py_func, argtypes: tuple, launch_bounds, cc: tuple):
    """The code library of kernel ``py_func`` for ``argtypes``, lowered for ``cc``, linked with link-time
    optimisation (its ``get_lto_ptx``/``get_cubin``/``get_linkerinfo`` take a target capability)."""
    from numba.cuda import compiler

    check_version()
    lib, _ = compiler._compile_pyfunc_with_fixup(py_func, argtypes, device=False, abi="numba", cc=cc, lto=True,
                                                 launch_bounds=launch_bounds)
    lib._lto = True
    return lib


@contextlib.contextmanager
def verbose_linker():
    """Within the block, the CUDA linker runs with ``verbose`` on, so a library's linker info holds ptxas's
    report (registers, spills, stack)."""
    from numba.cuda.cudadrv import driver

    check_version()
    original = driver._Linker._get_linker_options

    def verbose(self, ptx):   # the linker passes ``ptx`` by keyword
        options = original(self, ptx)
        options.verbose = True
        return options

    driver._Linker._get_linker_options = verbose
    try:
        yield
    finally:
        driver._Linker._get_linker_options = original
