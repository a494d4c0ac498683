"""sparsekit/gpu/spmm_bitmap.py compiles for sm_80 and sm_90 offline, and the post-LTO PTX shows what it relies on:
``mma.sync`` m16n8k16 in the value dtype with float32 accumulators; the weight's stream copied into the warp's
ring by ``cp.async`` (16 bytes a lane), refilled inside the group loop; a record's four bitmaps read from the ring
in one 16-byte shared load, a lane's register of each cell in one 32-bit shared load (``ld.shared.b32``, four a
fragment); popcounts for the decode; ``X`` read 16 bytes at a time; only warp barriers in the group loop (no
block barrier: each warp owns its ring); no ``.local`` memory and no spill."""
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
def build(cc, npad, bf16, linear, rows, slices, stages):
    out = U16 if bf16 else types.Array(types.float16, 1, "C")
    args = (U32, I32, U32, out, F32, I32) + (types.int64,) * 4
    return offline.build(sb._kernel(npad, bf16, linear, rows, slices, stages), args, cc)


# (N padded, bf16, linear, rows, slices, stages)
SETTINGS = [(8, False, True, 4, 4, 4), (16, True, True, 4, 4, 4), (32, True, False, 2, 2, 8), (64, False, True, 4, 1, 4)]


@pytest.mark.parametrize("cc", CCS, ids=str)
@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_kernel(cc, setting):
    npad = setting[0]
    ptx, report = build(cc, *setting)
    assert f".target sm_{cc[0]}{cc[1]}" in ptx
    kind = "bf16.bf16" if setting[1] else "f16.f16"
    assert ptx.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.f32") == 2 * npad // 8
    loop = mma_loop(ptx)
    assert any("cp.async.cg.shared.global" in x for x in loop)
    assert any(x.startswith("cp.async.wait_group") for x in loop)
    assert not [x for x in loop if x.startswith("bar.sync") or x.startswith("barrier.sync")]
    assert sum(x.startswith("ld.shared.v4.b32") for x in loop) == 2
    assert sum(x.startswith("ld.shared.b32") for x in loop) == 8
    assert sum(x.startswith("popc.b32") for x in loop) == 16
    assert not [x for x in loop if re.match(r"ld\.global(\.nc)?\.u16", x)]
    assert sum(bool(re.match(r"ld\.global(\.nc)?\.v4\.u32", x)) for x in loop) == npad // 8
    assert ".local" not in ptx
    use = offline.usage(report)
    assert use.spill_store_bytes == 0 and use.stack_bytes == 0, report
