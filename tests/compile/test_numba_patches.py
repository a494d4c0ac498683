"""``sparsekit.numba_patches``: ``fast_lowering`` finds the same singly assigned variables as the reviewed
original, in kernels with loops, branches, device functions and long generated blocks; and the replacements are
installed where documented (importing ``gpu``, compiling offline) and not where ``SPARSEKIT_NUMBA_PATCHES=0``."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from numba import cuda, types

from sparsekit.gpu import sparsify24
from sparsekit import numba_compat, numba_patches, offline


@cuda.jit
def _branches_and_loops(x, out, n):
    """Variables assigned once, reassigned in a loop, assigned in both arms of a branch, used across blocks."""
    t = cuda.grid(1)
    acc = 0.0
    scale = 2.0
    for i in range(n):
        acc += x[i] * scale
        if acc > 10.0:
            y = acc - 1.0
        else:
            y = acc + 1.0
        acc = y
    z = acc * acc
    out[t] = z


# a fresh copy of the sparsifier's generated greedy tile function (one block of hundreds of statements: its
# sorting network), so that it is lowered here even where the sparsifier's own copy was compiled before
_greedy16 = sparsify24._device(sparsify24._greedy16_source("index"), "greedy_tile16")


@cuda.jit
def _generated_tile(w, out):
    out[0], out[1] = _greedy16(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7])


@pytest.mark.parametrize("kernel,args", [
    (_branches_and_loops, (types.float32[::1], types.float32[::1], types.int64)),
    (_generated_tile, (types.uint32[::1], types.uint32[::1])),
])
def test_same_singly_assigned_variables_as_the_original(monkeypatch, kernel, args):
    if not numba_patches.fast_lowering():
        pytest.skip("numba-cuda's Lower._find_singly_assigned_variable is not the reviewed one "
                    "(REVIEWED_SINGLY_ASSIGNED_SHA256): review sparsekit.numba_patches against it")
    from numba.cuda import lowering
    original = numba_compat.replaced["Lower._find_singly_assigned_variable"]
    compared = []

    def both(self):
        original(self)
        expected = self._singly_assigned_vars
        numba_patches._singly_assigned(self)
        assert self._singly_assigned_vars == expected
        compared.append(len(expected))

    monkeypatch.setattr(lowering.Lower, "_find_singly_assigned_variable", both)
    offline.lto_ptx(kernel, args, (9, 0))
    assert compared and max(compared) > 0          # every lowered function (device functions too) compared


def test_a_source_not_reviewed_keeps_the_original_and_warns_once():
    """install() leaves a function whose source hash differs in place and warns about it once, not on every call."""
    class Owner:
        @staticmethod
        def original():
            return "original"

    def replacement():
        return "replacement"

    with pytest.warns(numba_compat.ReviewMismatchWarning, match="Owner.original"):
        assert not numba_compat.install(Owner, "original", replacement, (Owner.original, "0" * 64))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not numba_compat.install(Owner, "original", replacement, (Owner.original, "0" * 64))
    assert Owner.original() == "original"


def _installed_after(code: str, **env) -> str:
    """What a fresh Python process prints after ``code`` (the replacements are installed once per process)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", numba_patches.SWITCH)}
    done = subprocess.run([sys.executable, "-c", code], env={**environ, **env}, capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


_REPORT = ("from numba.cuda import lowering; from sparsekit import numba_patches; "
           "print(numba_patches.installed(), "
           "lowering.Lower._find_singly_assigned_variable is numba_patches._singly_assigned)")


def test_no_import_installs_anything_and_install_all_installs_the_lowering_replacement():
    """Where sparsekit/numba_patches.py documents it: importing sparsekit, its kernels and its layers replaces
    nothing; the explicit call installs it."""
    imports = "import sparsekit, sparsekit.gpu, sparsekit.gpu.spmm_bitmap, sparsekit.gpu.uspmm; "
    assert _installed_after(imports + _REPORT) == "{'fast_lowering': False} False"
    assert (_installed_after(imports + "from sparsekit import numba_patches; numba_patches.install_all(); " + _REPORT)
            == "{'fast_lowering': True} True")


def test_choosing_the_backend_installs_them():
    """The CLI's commands and the tutorials choose their backend first: that installs the replacements."""
    code = ("from sparsekit.backend import choose_backend; backend = choose_backend(); "
            "from sparsekit import numba_patches; state = numba_patches.installed(); "
            "print(backend, sorted(state), all(state.values()))")
    backend, names = _installed_after(code).split(" ", 1)
    want = "['fast_lowering']" if backend == "gpu" else "['fast_block_manager', 'fast_shared_arrays']"
    assert names == want + " True"


def test_install_all_under_the_simulator_installs_the_simulator_replacements():
    report = ("from sparsekit import numba_patches; numba_patches.install_all(); "
              "from numba.cuda.simulator import kernel, kernelapi; from sparsekit import simulator; "
              "print(kernel.BlockManager.run is simulator._run_block, "
              "kernelapi.FakeCUDAShared.array is simulator._shared_array)")
    assert _installed_after(report, NUMBA_ENABLE_CUDASIM="1") == "True True"


def test_the_switch_keeps_numba_cuda_s_own_code():
    assert _installed_after("from sparsekit import numba_patches; numba_patches.install_all(); " + _REPORT,
                            **{numba_patches.SWITCH: "0"}) == "{'fast_lowering': False} False"


def test_offline_compilation_installs_the_lowering_replacement():
    """sparsekit.offline installs it before it compiles, for kernels defined outside gpu."""
    code = ("from numba import cuda, types; from sparsekit import offline\n"
            "@cuda.jit\ndef k(x):\n    x[0] = 1.0\n"
            "offline.lto_ptx(k, (types.float32[::1],)); " + _REPORT.replace("; ", "\n"))
    assert _installed_after(code) == "{'fast_lowering': True} True"
