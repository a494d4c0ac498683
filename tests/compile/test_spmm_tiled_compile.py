"""sparsekit/gpu/spmm_tiled.py compiles for sm_80 and sm_90 offline, and the post-LTO PTX shows what it relies on:

* tiles: ``mma.sync`` m16n8k16 in the value dtype (f16 or bf16) with float32 accumulators, A fragments
  and B fragments by ``ldmatrix`` (transposed for a row-major ``B``), words and B slices copied by
  ``cp.async`` with a wait each step; the per-tile loop holds one ``bar.sync``, ``4 * rounds`` 16-bit
  stores of the scatter on 32-bit shared addresses and, where B is copied in 16-byte chunks, no
  division, remainder or float conversion of an index;
* rows: words read 16 bytes at a time (``ld.global.v4``), the warp sum by five shuffles a column of ``C``;
* neither through a stack: no ``.local``, no spill.
"""
from __future__ import annotations

import functools
import re

import pytest
from numba import types

from ptx_loops import mma_loop
from sparsekit import offline
from sparsekit.gpu import spmm_tiled as st

CCS = [(8, 0), (9, 0)]
U16, U32, I32 = (types.Array(t, 1, "C") for t in (types.uint16, types.uint32, types.int32))


def out_type(bf16: bool):
    return U16 if bf16 else types.Array(types.float16, 1, "C")


@functools.cache
def tiled(cc, wm, warps, tk, npad, bf16, linear, vector_b, stages, rounds):
    args = (U32, I32, U16, out_type(bf16), types.Array(types.float32, 1, "C"), I32) + (types.int64,) * 3
    return offline.build(st._kernel(wm, warps, tk, npad, bf16, linear, vector_b, stages, rounds), args, cc)


@functools.cache
def rows(cc, n, bf16, stride, linear):
    args = (U32, I32, U16, U32, out_type(bf16), types.int64, types.int64)
    return offline.build(st._row_kernel(n, bf16, stride, linear, st.ROW_UNROLL), args, cc)


# (16-row blocks a warp, warps, TK, N padded, bf16, linear, vector B, stages, word rounds)
TILED = [(2, 2, 64, 8, False, True, True, 4, 4), (1, 4, 64, 32, True, False, True, 3, 2),
         (2, 2, 64, 64, True, True, True, 3, 4), (1, 2, 128, 16, False, False, False, 6, 3)]


@pytest.mark.parametrize("cc", CCS, ids=str)
@pytest.mark.parametrize("setting", TILED, ids=str)
def test_tiled_kernel(cc, setting):
    wm, warps, tk, npad, bf16, linear, vector_b, stages, rounds = setting
    ptx, report = tiled(cc, *setting)
    assert f".target sm_{cc[0]}{cc[1]}" in ptx
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{'bf16.bf16' if bf16 else 'f16.f16'}.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert ("ldmatrix.sync.aligned.m8n8.x4.trans" in ptx) == (not linear)
    assert "cp.async.cg.shared.global" in ptx and f"cp.async.wait_group {stages - 3}" in ptx
    assert ".local" not in ptx
    use = offline.usage(report)
    assert use.spill_store_bytes == 0 and use.stack_bytes == 0, report
    loop = mma_loop(ptx)
    assert sum("bar.sync" in x for x in loop) == 1
    assert sum("st.shared.u16 [a]" in x for x in loop) == 4 * rounds
    if vector_b:                                         # (copying B element by element divides by N or TK)
        assert not [x for x in loop if re.match(r"^(div|rem)\.|^cvt\.rn\.f64", x)]


@pytest.mark.parametrize("cc", CCS, ids=str)
@pytest.mark.parametrize("n, bf16, stride, linear", [(1, False, 1, True), (8, True, 8, False), (16, False, 16, False),
                                                     (3, True, 8, True), (3, False, 3, False), (24, True, 24, True)])
def test_row_kernel(cc, n, bf16, stride, linear):
    """16-byte word loads; a row of B in 16-byte loads when its stride is a multiple of 8; registers only."""
    ptx, report = rows(cc, n, bf16, stride, linear)
    assert "ld.global.v4.u32" in ptx or "ld.global.nc.v4.u32" in ptx
    scalar_b = "ld.global.u16" in ptx or "ld.global.nc.u16" in ptx   # B's halves one by one
    assert scalar_b == (stride % 8 != 0)
    assert ptx.count("shfl.sync.bfly") == 5 * n
    assert ".local" not in ptx
    use = offline.usage(report)
    assert use.spill_store_bytes == 0 and use.stack_bytes == 0, report
