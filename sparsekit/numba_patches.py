"""Reviewed replacements of numba-cuda internals that are slow for this project's kernels, and
:func:`install_all`, the one call that installs them.

Where they are installed: only by an explicit call of :func:`install_all`, never by an import. sparsekit's
own entry points make it before anything is compiled or simulated: :func:`sparsekit.backend.choose_backend`, which
the CLI's commands (``sparsekit ...``, ``./dev``) and the tutorials call first, the test suite's
``tests/conftest.py`` and :mod:`sparsekit.offline`'s compile. A program of your own that calls the kernels may
make it once at its start:
without it the kernels compile and simulate with numba-cuda's own code, slower (the 2:4 sparsifier's largest
kernel builds in 16 s instead of 13 on two cores), and the simulator keeps numba-cuda's unlocked lookup of shared
arrays, which two simulated threads arriving together can split (:func:`sparsekit.simulator.fast_shared_arrays`).
On the GPU the replacements change no result. ``SPARSEKIT_NUMBA_PATCHES=0`` in the environment keeps numba-cuda's
own code (:func:`install_all` installs nothing), to rule them out when debugging; :func:`installed` says which
are in place, and :func:`install_all` logs it once (logger ``sparsekit.numba_patches``, level INFO).

Each replacement is installed only over the source it was written against (numba-cuda 0.30.4, by the sha256
of ``inspect.getsource``: :func:`sparsekit.numba_compat.install`); another version keeps its own code, slower
but correct, and a :class:`~sparsekit.numba_compat.ReviewMismatchWarning` says so once per replaced function.
The simulator's replacements (:mod:`sparsekit.simulator`) are installed the same way.

:func:`fast_lowering`: Numba's lowering of a function first finds its singly assigned variables, and for each
candidate it scanned every assignment of the candidate's block again: quadratic in a block's length. The
generated, unrolled kernels have blocks of thousands of statements (the 2:4 sparsifier's ``optimal`` kernel:
13 s of its 16 s build, 3 s of them in that scan, on the 2-core test machine). :func:`_singly_assigned`
counts each block's assignments once: the same variables, the same code
(``tests/compile/test_numba_patches.py``).
"""
from __future__ import annotations

import logging
import os
from collections import Counter, defaultdict

from sparsekit.numba_compat import install, replaced

#: sha256 of ``inspect.getsource`` of numba-cuda 0.30.4's ``numba.cuda.lowering.Lower._find_singly_assigned_variable``.
REVIEWED_SINGLY_ASSIGNED_SHA256 = "c3b499f76517288510a5188fbb59bb96f7ca7d619b0cf4245b5f66a8bd90bbe4"


def _singly_assigned(self):
    """``Lower._find_singly_assigned_variable`` (numba-cuda 0.30.4), linear: the variables assigned once, in one
    block, and used only there (they need no ``alloca``), with each block's assignments counted once."""
    from numba.cuda import lowering

    singly = set()
    if not self.func_ir.func_id.is_generator:
        use_defs = lowering.compute_use_defs(self.func_ir.blocks)
        alloca_vars = lowering.must_use_alloca(self.func_ir.blocks)
        defined_in = defaultdict(set)
        for block, names in use_defs.defmap.items():
            for name in names:
                defined_in[name].add(block)
        used_across = set().union(*use_defs.usemap.values())     # (the use map keeps no block-local uses)
        assignments = {}
        for name, blocks in defined_in.items():
            if name in alloca_vars or len(blocks) != 1 or name in used_across:
                continue
            [block] = blocks
            if block not in assignments:
                assignments[block] = Counter(stmt.target.name
                                             for stmt in self.blocks[block].find_insts(lowering.ir.assign_types))
            if assignments[block][name] == 1:
                singly.add(name)
    self._singly_assigned_vars = singly
    self._blk_local_varmap = {}


def fast_lowering() -> bool:
    """Install :func:`_singly_assigned` as ``Lower._find_singly_assigned_variable`` (idempotent). Returns whether it
    is installed: False where numba-cuda's is not the reviewed one (:data:`REVIEWED_SINGLY_ASSIGNED_SHA256`)."""
    from numba import config
    if config.ENABLE_CUDASIM:                           # (nothing is lowered)
        return False
    from numba.cuda import lowering
    return install(lowering.Lower, "_find_singly_assigned_variable", _singly_assigned,
                   (lowering.Lower._find_singly_assigned_variable, REVIEWED_SINGLY_ASSIGNED_SHA256))


#: Environment variable: ``0`` keeps numba-cuda's own code (:func:`install_all` installs nothing).
SWITCH = "SPARSEKIT_NUMBA_PATCHES"

#: The function each replacement installs over, as :data:`sparsekit.numba_compat.replaced` keys it.
_REPLACES = {"fast_lowering": "Lower._find_singly_assigned_variable", "fast_block_manager": "BlockManager.run",
             "fast_shared_arrays": "FakeCUDAShared.array"}

_logged: list = []


def enabled() -> bool:
    """Whether the replacements may be installed (:data:`SWITCH` is not ``0``)."""
    return os.environ.get(SWITCH, "1").strip() != "0"


def installed() -> dict[str, bool]:
    """Which replacements are in place in this process, by name (the simulator's apply only under it)."""
    from numba import config

    names = ["fast_lowering"] if not config.ENABLE_CUDASIM else ["fast_block_manager", "fast_shared_arrays"]
    return {name: _REPLACES[name] in replaced for name in names}


def install_all() -> dict[str, bool]:
    """Install every replacement that applies to this process (idempotent): :func:`fast_lowering` on the GPU
    path, :func:`sparsekit.simulator.fast_block_manager` and :func:`~sparsekit.simulator.fast_shared_arrays`
    under the CUDA simulator; nothing where ``SPARSEKIT_NUMBA_PATCHES=0``. Returns :func:`installed`, and logs
    it on the first call."""
    if enabled():
        from sparsekit.simulator import fast_block_manager, fast_shared_arrays
        fast_lowering()
        fast_block_manager()
        fast_shared_arrays()
    state = installed()
    if not _logged:
        _logged.append(True)
        logging.getLogger(__name__).info(
            "numba-cuda replacements %s (%s=%s)", ", ".join(f"{name}: {'installed' if on else 'not installed'}"
                                                            for name, on in state.items()),
            SWITCH, os.environ.get(SWITCH, "unset"))
    return state
