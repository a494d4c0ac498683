"""What a Numba CUDA kernel compiles to, found without a GPU: post-LTO PTX and ptxas's resource report.

The recipe of docs/numba_notes.md, in one place for the compile checks and the benchmarks: compile the
kernel's Python function with link-time optimisation for a compute capability, ask nvJitLink for the PTX
after LTO (the code that really runs, device functions and intrinsics inlined), then link a cubin with
the linker made verbose so that ptxas's lines "Used N registers" and "S bytes spill stores, L bytes spill
loads" come back. Only NVVM, NVRTC and nvJitLink are needed (the ``numba-cuda[cu13]`` wheels); a kernel
that asks for the current device while compiling needs a fake one (``tests/compile/conftest.py``).

Numba's front end (typing, lowering, its LLVM passes) is most of a build's time, and its output does not
depend on the target from compute capability 7.5 on (:data:`SAME_LOWERING_FROM`): one front-end compile
per kernel and argument types serves sm_80 and sm_90 alike; NVVM, LTO and ptxas still run per target.
"""
from __future__ import annotations

import functools
import re
from typing import NamedTuple

from sparsekit.numba_compat import lto_library, verbose_linker
from sparsekit.numba_patches import install_all


class Build(NamedTuple):
    ptx: str      #: post-LTO PTX ("" when not asked for)
    report: str   #: the verbose linker's log, ptxas's lines included


class Usage(NamedTuple):
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int   #: a stack frame: arrays demoted to local memory


#: numba-cuda (0.30) lowers a kernel differently below compute capability 6.0 (float64 atomics) and 7.5
#: (``tanh.approx`` under fastmath) only, so from 7.5 on the front end's output is the same for every
#: target (``tests/compile/test_offline.py`` compares sm_80 and sm_90 PTX from a shared and an own front end).
SAME_LOWERING_FROM = (7, 5)


@functools.lru_cache(maxsize=64)   # ~1 MB of LLVM IR each, plus per-target PTX and cubins
def _library(kernel, argtypes: tuple, launch_bounds, lowering_cc: tuple):
    """The kernel's code library with link-time optimisation, through Numba's front end once per
    (kernel, argument types, launch bounds, lowering capability); numba-cuda's lowering with the reviewed
    replacements (:func:`sparsekit.numba_patches.install_all`: kernels from outside ``gpu`` too)."""
    install_all()
    return lto_library(kernel.py_func, argtypes, launch_bounds, lowering_cc)


def _library_for(kernel, argtypes, cc: tuple, launch_bounds):
    if launch_bounds is None:
        launch_bounds = kernel.targetoptions.get("launch_bounds")
    return _library(kernel, tuple(argtypes), launch_bounds, min(cc, SAME_LOWERING_FROM))


def lto_ptx(kernel, argtypes, cc=(9, 0), *, launch_bounds=None) -> str:
    """The post-LTO PTX of ``kernel`` (a ``cuda.jit`` dispatcher) for ``argtypes`` and ``cc``: the code that
    runs, device functions and intrinsics inlined (docs/numba_notes.md: the plain PTX hides fp16 math in
    shims). ``launch_bounds`` defaults to the kernel's own (``@cuda.jit(launch_bounds=...)``)."""
    cc = tuple(cc)
    return _library_for(kernel, argtypes, cc, launch_bounds).get_lto_ptx(cc=cc)


def build(kernel, argtypes, cc=(9, 0), *, launch_bounds=None, want_ptx: bool = True) -> Build:
    """:func:`lto_ptx` and ptxas's verbose report of linking ``kernel`` for ``cc``.

    ``launch_bounds`` defaults to the kernel's own, so the report shows the registers the launched
    kernel gets. ``want_ptx=False`` skips the post-LTO PTX (one LTO pass less).
    """
    cc = tuple(cc)
    text = lto_ptx(kernel, argtypes, cc, launch_bounds=launch_bounds) if want_ptx else ""
    lib = _library_for(kernel, argtypes, cc, launch_bounds)
    with verbose_linker():
        lib.get_cubin(cc=cc)          # cached per cc in the library, with the (verbose) log of its link
        report = lib.get_linkerinfo(cc)
    return Build(text, report)


def usage(report: str) -> Usage:
    """Registers, spill and stack bytes of the kernel from a :func:`build` report (ptxas's last entry,
    the kernel's own; device functions are inlined by LTO)."""
    def last(pattern: str) -> int:
        found = re.findall(pattern, report)
        if not found:
            raise ValueError(f"report: no match for {pattern!r} in the linker log:\n{report}")
        return int(found[-1])
    return Usage(last(r"Used (\d+) registers"), last(r"(\d+) bytes spill stores"),
                 last(r"(\d+) bytes spill loads"), last(r"(\d+) bytes stack frame"))


def longest_branch_free_loads(ptx: str) -> int:
    """The most ``ld.global`` after the last ``atom.global`` of ``ptx`` (a K split's sum, after its ticket) in one
    branch-free stretch (no label, no ``bra`` between them): loads each behind a branch of their own wait for the
    one before, so this is how many of the sum's loads a thread can have in flight."""
    lines = [x.strip() for x in ptx.splitlines()]
    atom = max(i for i, x in enumerate(lines) if x.startswith("atom.global"))
    runs, run = [0], 0
    for x in lines[atom:]:
        if re.match(r"^\$?\w+:", x) or re.match(r"^(@!?%p\d+\s+)?bra", x):
            runs.append(run)
            run = 0
        elif x.startswith("ld.global"):
            run += 1
    return max(runs + [run])
