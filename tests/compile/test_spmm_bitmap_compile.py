"""sparsekit/gpu/spmm_bitmap.py compiles for sm_80 and sm_90 offline, and the post-LTO PTX shows what it relies on:
``mma.sync`` m16n8k16 in the value dtype with float32 accumulators; a lane's half of the bitmaps and ``X`` read 16
bytes at a time (``ld.global.v4``), the header 8 (``ld.global.v2``), the values by 16-bit loads; popcounts for the
decode; no barrier in the group loop
(nothing goes through shared memory on the way in); no ``.local`` memory and no spill."""
from __future__ import annotations

import functools
import re

import pytest
from numba import types

from ptx_loops import mma_loop
from sparsekit import offline
from sparsekit.gpu import spmm_bitmap as sb

CCS = [(8, 0), (9, 0)]
U16, U32, I32, F32 = (types.Array(t, 1, "C") for t in (types.uint16, types.uint32, types.int32, types.float32))


@functools.cache
def build(cc, npad, bf16, linear, rows, slices, ahead=2048):
    out = U16 if bf16 else types.Array(types.float16, 1, "C")
    args = (U32, U16, I32, U32, out, F32, I32) + (types.int64,) * 5
    return offline.build(sb._kernel(npad, bf16, linear, rows, slices, ahead), args, cc)


# (N padded, bf16, linear, rows, slices)
SETTINGS = [(8, False, True, 4, 1), (16, True, True, 4, 1), (32, True, False, 2, 2), (64, False, True, 4, 1)]


@pytest.mark.parametrize("cc", CCS, ids=str)
@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_kernel(cc, setting):
    npad, bf16, linear, rows, slices = setting
    ptx, report = build(cc, *setting)
    assert f".target sm_{cc[0]}{cc[1]}" in ptx
    kind = "bf16.bf16" if bf16 else "f16.f16"
    assert ptx.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.f32") == 2 * npad // 8
    assert "popc.b32" in ptx and "prefetch.global.L2" in ptx
    loop = mma_loop(ptx)
    assert not [x for x in loop if "bar.sync" in x]
    assert sum(bool(re.match(r"ld\.global(\.nc)?\.v4\.u32", x)) for x in loop) == 2 + npad // 8
    assert sum(bool(re.match(r"ld\.global(\.nc)?\.v2\.u32", x)) for x in loop) == 2
    assert sum(bool(re.match(r"ld\.global(\.nc)?\.u16", x)) for x in loop) == 16
    assert ".local" not in ptx
    use = offline.usage(report)
    assert use.spill_store_bytes == 0 and use.stack_bytes == 0, report
