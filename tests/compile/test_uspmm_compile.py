"""Every USpMM kernel, tunable shape and dtype compiles for sm_80 and sm_90 offline;
the post-LTO PTX shows the vector loads USpMM-Vec and the pipelined kernel rely on."""
from __future__ import annotations

import re

import pytest
from numba import types

from sparsekit.gpu import uspmm as gu
from sparsekit import offline

CCS = [(8, 0), (9, 0)]
VALUE_TYPES = {"float32": types.float32, "float16": types.float16}
INDEX_TYPES = {"int32": types.int32, "int16": types.int16}


def listing1_args(vt, it, layout):
    mat = types.Array(vt, 2, layout)
    return [types.Array(vt, 1, "C"), types.Array(it, 1, "C"), mat, mat, types.int64, types.int64, types.int64]


def split_args():
    """``part`` (nsplit x M x N float32), ``ticket`` (int32 per output tile) of the K-split kernels."""
    return [types.Array(types.float32, 3, "C"), types.Array(types.int32, 1, "C")]


def pipelined_args(vt, it):
    """``vals``, ``idxs``, ``slot_ptr``, ``b``, ``c``, the split buffers, ``m``, ``n``, ``k``, ``vec_ok``,
    ``nsplit``."""
    return ([types.Array(vt, 2, "C"), types.Array(it, 2, "C"), types.Array(types.int32, 2, "C"),
             types.Array(vt, 1, "C"), types.Array(vt, 2, "C")] + split_args()
            + [types.int64, types.int64, types.int64, types.boolean, types.int64])


# value/index dtype pairs: every value dtype and every index dtype at least once
PAIRS = [("float32", "int32"), ("float16", "int16"), ("float32", "int16")]


# every Listing 1 shape with every value/index pair, the two ccs alternating (each cc sees every shape and
# every pair; the full cross product compiled each twice for the suite's time)
LISTING1_BUILDS = [(CCS[(i + j) % 2], dtype, index, *shape)
                   for i, shape in enumerate([(8, 1, 1), (8, 2, 1), (8, 2, 2), (3, 1, 4)])
                   for j, (dtype, index) in enumerate(PAIRS)]


@pytest.mark.parametrize("cc,dtype,index,vsize,nwarp,vecsize", LISTING1_BUILDS)
def test_listing1_compiles(cc, dtype, index, vsize, nwarp, vecsize):
    kernel = gu._listing1_kernel(vsize, vsize * nwarp, vecsize)
    for layout in ("C", "F"):
        ptx = offline.lto_ptx(kernel, listing1_args(VALUE_TYPES[dtype], INDEX_TYPES[index], layout), cc)
        assert f".target sm_{cc[0]}{cc[1]}" in ptx
        assert "bar.sync" in ptx                                   # line 41, __syncthreads
        assert ".local" not in ptx                                 # ctmp lives in registers


@pytest.mark.parametrize("cc", CCS)
@pytest.mark.parametrize("dtype,index,vecsize,expect", [
    ("float32", "int32", 2, ["ld.global.v2.f32", "ld.global.v2.u32"]),
    ("float32", "int32", 4, ["ld.global.v4.f32", "ld.global.v4.u32"]),
    ("float16", "int16", 2, ["ld.global.u32"]),                     # 2 halves, 2 int16 = 4 bytes each
    ("float16", "int32", 4, ["ld.global.v2.u32", "ld.global.v4.u32"]),
])
def test_vec_uses_vector_loads(cc, dtype, index, vecsize, expect):
    kernel = gu._listing1_kernel(8, 8, vecsize)
    ptx = offline.lto_ptx(kernel, listing1_args(VALUE_TYPES[dtype], INDEX_TYPES[index], "F"), cc)
    for instr in expect:
        assert re.search(re.escape(instr) + r"\s", ptx), f"{instr} missing from the USpMM-Vec PTX"


# every cc and dtype at the default shape; the 8-columns, unroll-2 shape once (each build ~3 s)
PIPELINED_BUILDS = [(cc, dt, ix, (4, 4, 8, 32, 4, 2)) for cc in CCS for dt, ix in (("float32", "int32"),
                                                                                    ("float16", "int16"))]
PIPELINED_BUILDS.append(((9, 0), "float32", "int16", (8, 2, 8, 16, 2, 2)))


@pytest.mark.parametrize("cc,dtype,index,shape", PIPELINED_BUILDS)
def test_pipelined_compiles_with_vector_loads_and_stores(cc, dtype, index, shape):
    """The B tile is read from global memory and written to shared memory 16 bytes at a time
    (float16 converted to float32 on the way), read back with ``ld.shared.v4.f32``, and the
    multiply-adds take their operands from registers: no local memory in the inner loop."""
    cpl, rpw, nwarp, kc, unroll, min_blocks = shape
    kernel = gu._pipelined_kernel(cpl, rpw, nwarp, kc, unroll, dtype == "float16", min_blocks)
    ptx = offline.lto_ptx(kernel, pipelined_args(VALUE_TYPES[dtype], INDEX_TYPES[index]), cc)
    assert "ld.global.v4" in ptx and "st.shared.v4.f32" in ptx and "ld.shared.v4.f32" in ptx
    assert ptx.count("bar.sync") == 5                              # prologue (2), one per K chunk, split ticket (2)
    inner = ptx[ptx.index("ld.shared.v4.f32"):ptx.rindex("fma.rn.f32")]
    assert "ld.local" not in inner and "st.local" not in inner


@pytest.mark.parametrize("cc", CCS)
@pytest.mark.parametrize("dtype,index,cpl", [("float32", "int32", 8), ("float16", "int16", 8)])
def test_direct_compiles_with_vector_loads(cc, dtype, index, cpl):
    """B is read 16 bytes a lane (two reads of 4 floats, one of 8 halves), no local memory."""
    kernel = gu._direct_kernel(cpl, 2, 4, dtype == "float16")
    args = [types.Array(VALUE_TYPES[dtype], 2, "C"), types.Array(INDEX_TYPES[index], 2, "C"),
            types.Array(VALUE_TYPES[dtype], 1, "C"), types.Array(VALUE_TYPES[dtype], 2, "C"), *split_args(),
            types.int64, types.int64, types.int64, types.boolean, types.int64]
    ptx = offline.lto_ptx(kernel, args, cc)
    assert "ld.global.v4" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx
    assert ptx.count("bar.sync") == 2                              # only the split's ticket (nsplit > 1)


@pytest.mark.parametrize("cc", CCS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_dense_tile_compiles_to_register_outer_products(cc, dtype):
    """Per k: one ``ld.shared.v4`` of B and two (broadcast) of A^T feed 32 multiply-adds whose
    accumulators stay in registers."""
    kernel = gu._dense_tile_kernel(4, 8, 8, 16, dtype == "float16", 2)
    args = [types.Array(types.float32, 2, "C"), types.Array(VALUE_TYPES[dtype], 1, "C"),
            types.Array(VALUE_TYPES[dtype], 2, "C"), *split_args(), types.int64, types.int64, types.int64,
            types.boolean, types.int64]
    ptx = offline.lto_ptx(kernel, args, cc)
    assert "ld.global.v4" in ptx and "st.shared.v4.f32" in ptx and "ld.shared.v4.f32" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx
    assert ptx.count("fma.rn.f32") >= 64                           # two k a step, 8 x 4 each


@pytest.mark.parametrize("variant", ["pipelined", "direct", "dense_tile"])
def test_split_epilogue_fences_then_takes_a_ticket(variant):
    """The K-split epilogue: the partial tile is stored, ``membar.gl`` (threadfence) orders it before
    the ticket's ``atom.global.add``, and the last block's fixed-order sum follows, two elements' loads of
    the partials side by side (LLVM unrolls the loop over the partials by 4: 8 in one branch-free stretch;
    one element at a time behind its bounds test, 4)."""
    cc = (9, 0)
    if variant == "pipelined":
        kernel, args = gu._pipelined_kernel(4, 1, 8, 32, 4, False, 2), pipelined_args(types.float32, types.int32)
    elif variant == "direct":
        kernel = gu._direct_kernel(4, 2, 4, False)
        args = [types.Array(types.float32, 2, "C"), types.Array(types.int32, 2, "C"),
                types.Array(types.float32, 1, "C"), types.Array(types.float32, 2, "C"), *split_args(),
                types.int64, types.int64, types.int64, types.boolean, types.int64]
    else:
        kernel = gu._dense_tile_kernel(4, 8, 8, 16, False, 2)
        args = [types.Array(types.float32, 2, "C"), types.Array(types.float32, 1, "C"),
                types.Array(types.float32, 2, "C"), *split_args(), types.int64, types.int64, types.int64,
                types.boolean, types.int64]
    ptx = offline.lto_ptx(kernel, args, cc)
    fence, ticket = ptx.index("membar.gl"), ptx.index("atom.global.add.u32")
    assert fence < ticket
    assert "ld.local" not in ptx and "st.local" not in ptx
    assert offline.longest_branch_free_loads(ptx) >= 8


def warp_split_args(vt, it):
    return [types.Array(vt, 2, "C"), types.Array(it, 2, "C"), types.Array(vt, 1, "C"), types.Array(vt, 2, "C"),
            types.int64, types.int64, types.int64, types.boolean]


# (cols_per_lane, rows_per_warp, nwarp, unroll, min_blocks), dtype, index dtype, the PTX vector read of B, the
# registers designed for (sm_90): min_blocks blocks of nwarp warps an SM, i.e. at most 65536 / (32 * nwarp *
# min_blocks); measured 62, 80, 80 and 86 (one block: 128, float16 8 halves a lane)
WARP_SPLIT_BUILDS = [((4, 1, 8, 4, 4), "float32", "int32", "ld.global.v4.f32", 64),
                     ((4, 1, 8, 8, 3), "float32", "int16", "ld.global.v4.f32", 80),
                     ((4, 1, 4, 8, 6), "float16", "int32", "ld.global.v2.u32", 80),
                     ((4, 2, 8, 8, 1), "float32", "int32", "ld.global.v4.f32", 88),
                     ((8, 2, 8, 8, 1), "float16", "int16", "ld.global.v4.u32", 128)]


@pytest.mark.parametrize("shape,dtype,index,vread,max_regs", WARP_SPLIT_BUILDS)
def test_warp_split_issues_unroll_reads_of_b_before_the_multiply_adds(shape, dtype, index, vread, max_regs):
    """The interior step: ``unroll`` vector reads of B (one per entry and 16 bytes of columns) come before
    its first multiply-add, so that many rows of B are in flight per warp; one barrier (the partials);
    no atomics; no local memory or spills; registers as designed; no integer division by a run-time value."""
    cpl, rpw, nwarp, unroll, min_blocks = shape
    half = dtype == "float16"
    kernel = gu._warp_split_kernel(cpl, rpw, nwarp, unroll, half, min_blocks)
    ptx, report = offline.build(kernel, warp_split_args(VALUE_TYPES[dtype], INDEX_TYPES[index]), (9, 0))
    first_fma = ptx.index("fma.rn.f32")
    reads = len(re.findall(re.escape(vread) + r"\s", ptx[:first_fma]))
    assert reads == unroll * (cpl // min(cpl, 8 if half else 4))
    assert ptx.count("bar.sync") == 1 and "atom." not in ptx
    assert ".local" not in ptx
    assert "div.s" not in ptx and "div.u" not in ptx and "rem." not in ptx
    use = offline.usage(report)
    assert use.spill_store_bytes == use.spill_load_bytes == use.stack_bytes == 0
    assert use.registers <= max_regs, use


def test_warp_split_compiles_for_sm80():
    ptx = offline.lto_ptx(gu._warp_split_kernel(4, 2, 8, 8, False), warp_split_args(types.float32, types.int32), (8, 0))
    assert ".target sm_80" in ptx and "ld.global.v4.f32" in ptx and "ld.shared.v4.f32" in ptx


def test_kernel_factories_are_cached():
    """One dispatcher (one compilation) per tunable setting: a factory without ``functools.cache``
    would compile again on every call."""
    assert gu._pipelined_kernel(4, 1, 8, 32, 4, False, 2) is gu._pipelined_kernel(4, 1, 8, 32, 4, False, 2)
    assert gu._dense_tile_kernel(4, 8, 8, 16, False, 2) is gu._dense_tile_kernel(4, 8, 8, 16, False, 2)
    assert gu._direct_kernel(4, 2, 4, False) is gu._direct_kernel(4, 2, 4, False)
    assert gu._listing1_kernel(8, 8, 1) is gu._listing1_kernel(8, 8, 1)
    assert gu._warp_split_kernel(4, 2, 8, 8, False) is gu._warp_split_kernel(4, 2, 8, 8, False)
