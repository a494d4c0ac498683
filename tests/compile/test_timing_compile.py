"""The timing helpers' kernels compile offline for sm_80 and sm_90.

The spin kernel must keep polling ``%globaltimer`` inside its loop (an inline
asm read marked side-effecting, so it is not hoisted) and nap with
``nanosleep``; the flush kernel must store to memory.
"""
import re

import pytest
from numba import cuda, int32, int64

from sparsekit.timing import kernels


@pytest.mark.parametrize("cc", [(8, 0), (9, 0)])
def test_spin_kernel_polls_globaltimer_in_its_loop(cc):
    ptx, _ = cuda.compile_ptx(kernels().spin, (int64,), cc=cc)
    assert f".target sm_{cc[0]}{cc[1]}" in ptx
    reads = re.findall(r"mov\.u64\s+%rd\d+,\s*%globaltimer;", ptx)
    assert len(reads) >= 2, "one read before the loop, at least one inside it"
    assert "nanosleep.u32" in ptx
    assert re.search(r"@%p\d+ bra", ptx), "the poll must be a loop"


@pytest.mark.parametrize("cc", [(8, 0), (9, 0)])
def test_flush_kernel_writes_global_memory(cc):
    ptx, _ = cuda.compile_ptx(kernels().flush, (int32[:], int64), cc=cc)
    # Numba addresses arrays generically: a plain st.u32 is a store to global memory here.
    assert re.search(r"\bst(\.global)?\.(u32|b32|s32)\s", ptx)
