"""The private numba-cuda attributes sparsekit relies on, reached in one place and checked against the reviewed
version.

numba-cuda has no public way to get a compiled kernel's driver function (needed to set its shared-memory
attribute, launch it with cluster dimensions, or replay it through the driver), so these helpers read private
attributes that may move between releases. ``pyproject.toml`` bounds numba-cuda below the next minor version
and a different minor version warns once (:class:`UnreviewedNumbaWarning`). The faster replacements of
numba-cuda functions are :mod:`sparsekit.numba_patches` and :mod:`sparsekit.simulator`.
"""
from __future__ import annotations

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
