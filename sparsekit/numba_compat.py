"""The private numba-cuda attributes sparsekit relies on, reached in one place, each through a guard.

numba-cuda has no public way to get a compiled kernel's driver function (needed to set its shared-memory
attribute, launch it with cluster dimensions, or replay it through the driver), to pack a kernel's arguments
as its launch does, to cache a device array's Numba type, to compile a kernel for a target other than the
current device with link-time optimisation, or to ask ptxas for its verbose report. The helpers below do
these with private functions and attributes, every one read through :func:`private`: where a numba-cuda
release has moved one, the call fails at once with :class:`NumbaInternalsError`, naming the attribute, the
installed numba-cuda version and the reviewed one, instead of an ``AttributeError`` deep in a launch.

``pyproject.toml`` and ``environment.yml`` bound numba-cuda to the reviewed minor version
(:data:`REVIEWED_NUMBA_CUDA`); another minor version warns once (:class:`UnreviewedNumbaWarning`). The
faster replacements of numba-cuda functions (:mod:`sparsekit.numba_patches`, :mod:`sparsekit.simulator`) are
guarded differently: :func:`install` puts each only over the source it was reviewed against (by its hash),
and another source keeps Numba's own code with one :class:`ReviewMismatchWarning`.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import inspect
import warnings

__all__ = ["REVIEWED_NUMBA_CUDA", "NumbaInternalsError", "UnreviewedNumbaWarning", "ReviewMismatchWarning", "private",
           "install", "is_reviewed", "replaced", "kernel_function", "pack_arguments", "core_stream", "numba_type",
           "cache_numba_type", "lto_library", "verbose_linker"]

#: The numba-cuda minor version whose internals these helpers were reviewed against.
REVIEWED_NUMBA_CUDA = "0.30"

#: The cached property of a Numba device array that holds its Numba type (computed on its first launch).
_NUMBA_TYPE = "_numba_type_"


class UnreviewedNumbaWarning(RuntimeWarning):
    """The installed numba-cuda is not the reviewed minor version: its private attributes may have moved."""


class NumbaInternalsError(RuntimeError):
    """A private numba-cuda attribute sparsekit relies on is missing from the installed numba-cuda."""


def installed_version() -> str:
    """The installed numba-cuda's version (``"0.30.4"``)."""
    return importlib.metadata.version("numba-cuda")


def is_reviewed_version(version: str) -> bool:
    """Whether numba-cuda ``version`` (``"0.30.4"``) is of the reviewed minor version."""
    return version.split(".")[:2] == REVIEWED_NUMBA_CUDA.split(".")


@functools.cache
def check_version() -> None:
    """Warn once when the installed numba-cuda is not of :data:`REVIEWED_NUMBA_CUDA`."""
    version = installed_version()
    if not is_reviewed_version(version):
        warnings.warn(f"numba-cuda {version} is not the reviewed {REVIEWED_NUMBA_CUDA}.x: the private attributes "
                      "sparsekit.numba_compat reads may have moved", UnreviewedNumbaWarning, stacklevel=3)


def private(owner, name: str):
    """``owner.name``, a private numba-cuda attribute; where it is missing, :class:`NumbaInternalsError` naming it,
    the installed numba-cuda and the reviewed minor version (the one ``pyproject.toml`` allows)."""
    check_version()
    try:
        return getattr(owner, name)
    except AttributeError:
        where = getattr(owner, "__qualname__", None) or getattr(owner, "__name__", None) or type(owner).__qualname__
        raise NumbaInternalsError(
            f"numba-cuda {installed_version()} has no {where}.{name}, a private attribute sparsekit relies on "
            f"(reviewed against numba-cuda {REVIEWED_NUMBA_CUDA}.x): install numba-cuda>={REVIEWED_NUMBA_CUDA},"
            f"<{_next_minor(REVIEWED_NUMBA_CUDA)} as pyproject.toml asks, or review sparsekit.numba_compat against "
            f"this version") from None


def _next_minor(version: str) -> str:
    major, minor = version.split(".")[:2]
    return f"{major}.{int(minor) + 1}"


def kernel_function(compiled):
    """The driver function of a compiled kernel (one entry of ``kernel.overloads``): ``.handle`` is its
    CUkernel, ``.kernel`` what ``cuLaunchKernelEx`` takes."""
    return private(compiled, "_codelibrary").get_cufunc()


def pack_arguments(compiled, args, stream) -> tuple[list, list]:
    """``args`` of a launch of ``compiled`` packed as Numba's own launch packs them: the flat kernel
    parameters, and the write-backs to call after the launch (host arrays copied back)."""
    prepare = private(compiled, "_prepare_args")
    writebacks, params = [], []
    for ty, value in zip(compiled.argument_types, args):
        prepare(ty, value, stream, writebacks, params)
    return params, writebacks


def core_stream(stream):
    """Numba stream (or 0, the default stream) ``stream`` as the ``cuda.core`` stream its launch uses."""
    from numba.cuda.cudadrv import driver

    return private(driver, "_to_core_stream")(stream)


def numba_type(dev):
    """The Numba type of device array ``dev`` (computed on first use, then cached in the array)."""
    return private(dev, _NUMBA_TYPE)


def cache_numba_type(dev, numba_type_) -> None:
    """Give device array ``dev`` the Numba type ``numba_type_`` (one :func:`numba_type` returned for an array of
    the same dtype and layout), so that its first launch does not compute it again."""
    vars(dev)[_NUMBA_TYPE] = numba_type_


def lto_library(py_func, argtypes: tuple, launch_bounds, cc: tuple):
    """The code library of kernel ``py_func`` for ``argtypes``, lowered for ``cc``, linked with link-time
    optimisation (its ``get_lto_ptx``/``get_cubin``/``get_linkerinfo`` take a target capability)."""
    from numba.cuda import compiler

    compile_with_fixup = private(compiler, "_compile_pyfunc_with_fixup")
    lib, _ = compile_with_fixup(py_func, argtypes, device=False, abi="numba", cc=cc, lto=True,
                                launch_bounds=launch_bounds)
    private(lib, "_lto")                         # (the flag must exist to mean what setting it means)
    lib._lto = True
    return lib


@contextlib.contextmanager
def verbose_linker():
    """Within the block, the CUDA linker runs with ``verbose`` on, so a library's linker info holds ptxas's
    report (registers, spills, stack)."""
    from numba.cuda.cudadrv import driver

    linker = private(driver, "_Linker")
    original = private(linker, "_get_linker_options")

    def verbose(self, ptx):   # the linker passes ``ptx`` by keyword
        options = original(self, ptx)
        options.verbose = True
        return options

    linker._get_linker_options = verbose
    try:
        yield
    finally:
        linker._get_linker_options = original


# --- replacing numba-cuda functions: only over the source that was reviewed ------------------------------------

#: The functions replaced, by name (kept for the tests, which run them beside their replacements).
replaced: dict = {}

#: The functions left unreplaced because their source is not the reviewed one (each warned about once).
_mismatched: set = set()


class ReviewMismatchWarning(RuntimeWarning):
    """A numba-cuda function's source is not the reviewed one, so its faster replacement is not installed."""


def is_reviewed(obj, sha256: str) -> bool:
    """Whether ``obj``'s source is the reviewed one (its sha256 is ``sha256``)."""
    return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest() == sha256


def install(owner, name: str, replacement, *reviews) -> bool:
    """Put ``replacement`` at ``owner.name`` (idempotent), the original kept in :data:`replaced` as
    ``"Owner.name"``, where every ``(obj, sha256)`` of ``reviews`` is the reviewed source (:func:`is_reviewed`).
    Returns whether it is in place; where a source differs, warns once (:class:`ReviewMismatchWarning`). Once
    installed it is never installed again: what replaced it since (a test's wrapper) stays."""
    key = f"{owner.__name__}.{name}"
    if key in replaced:
        return getattr(owner, name) is replacement
    if key in _mismatched:
        return False
    if not all(is_reviewed(obj, sha256) for obj, sha256 in reviews):
        _mismatched.add(key)
        warnings.warn(f"{key} is not the reviewed numba-cuda source: its replacement is not installed and "
                      f"Numba's own (slower, correct) code runs", ReviewMismatchWarning, stacklevel=2)
        return False
    replaced[key] = getattr(owner, name)
    setattr(owner, name, replacement)
    return True
