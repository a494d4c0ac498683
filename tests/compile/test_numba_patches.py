"""``sparsekit.numba_patches.fast_lowering``: Numba's lowering finds the same singly assigned variables as the
reviewed original, in kernels with loops, branches, device functions and long generated blocks."""
from __future__ import annotations

import warnings

import pytest
from numba import cuda, types

from gpu import sparsify24
from sparsekit import numba_patches, offline


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
    original = numba_patches.replaced["Lower._find_singly_assigned_variable"]
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

    with pytest.warns(numba_patches.ReviewMismatchWarning, match="Owner.original"):
        assert not numba_patches.install(Owner, "original", replacement, (Owner.original, "0" * 64))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not numba_patches.install(Owner, "original", replacement, (Owner.original, "0" * 64))
    assert Owner.original() == "original"
