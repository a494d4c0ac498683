"""sparsekit/gpu/spmm_ell_rows.py compiles for sm_80 and sm_90 offline: values and columns read 16 bytes at a time,
``x^T``'s rows too once staged (``N >= 2``), the warp sum by five shuffles a column, no stack."""
from __future__ import annotations

import re

import pytest
from numba import types

from sparsekit.gpu import spmm_ell_rows as ser
from sparsekit import offline

CCS = [(8, 0), (9, 0)]
U16, U32 = (types.Array(t, 1, "C") for t in (types.uint16, types.uint32))
F16 = types.Array(types.float16, 1, "C")


@pytest.mark.parametrize("cc", CCS, ids=str)
@pytest.mark.parametrize("n, bf16, stride", [(1, False, 1), (1, True, 1), (8, True, 8), (16, False, 16), (3, False, 8)])
def test_linear_kernel(cc, n, bf16, stride):
    args = (U32, U32, U16, U32, U16 if bf16 else F16) + (types.int64,) * 3
    ptx, report = offline.build(ser._kernel(n, bf16, stride, ser.UNROLL), args, cc)
    assert ptx.count("ld.global.v4.u32") + ptx.count("ld.global.nc.v4.u32") >= 2 * ser.UNROLL
    assert ("ld.global.u16" in ptx or "ld.global.nc.u16" in ptx) == (stride % 8 != 0)
    assert ptx.count("shfl.sync.bfly") == 5 * n
    assert ".local" not in ptx
    use = offline.usage(report)
    assert use.spill_store_bytes == 0 and use.stack_bytes == 0, report


@pytest.mark.parametrize("cc", CCS, ids=str)
@pytest.mark.parametrize("wide", [False, True])
def test_densify_kernel(cc, wide):
    """The zeros in 16-byte stores when K % 8 == 0; one warp barrier before the entries (a row is its warp's)."""
    ptx, report = offline.build(ser._densify(wide), (U16, U16, U16, U32 if wide else U16) + (types.int64,) * 3, cc)
    assert "bar.warp.sync" in ptx and "bar.sync" not in ptx and ".local" not in ptx
    assert ("st.global.v4.u32" in ptx) == wide


@pytest.mark.parametrize("cc", CCS, ids=str)
@pytest.mark.parametrize("n, bf16, stride, wide", [(1, False, 1, False), (1, True, 1, False), (1, False, 1, True),
                                                   (1, True, 1, True), (8, True, 8, True), (16, False, 16, True),
                                                   (3, True, 8, True)])
def test_shared_kernel(cc, n, bf16, stride, wide):
    """x^T read from shared memory (16-byte ld.shared.v4 rows from N = 2, halves at N = 1), values and columns
    in 16-byte global loads, no stack; ``wide`` (always from N = 2, the staged x^T): x^T copied in by 16-byte
    loads, COPY_LOADS of them before the first store (no half loaded from global memory). Before the copy, each
    warp's first row: its first UNROLL chunks of values and columns (two 16-byte loads each) issued."""
    args = (U32, U32, U16, U32 if wide else U16, U16 if bf16 else F16) + (types.int64,) * 3
    ptx, report = offline.build(ser._shared_kernel(n, bf16, stride, ser.UNROLL, wide), args, cc)
    assert ("ld.shared.v4.u32" in ptx) == (stride % 8 == 0) and ("ld.shared.u16" in ptx) == (stride == 1)
    assert ("ld.global.u16" in ptx or "ld.global.nc.u16" in ptx) != wide
    body = ptx[:ptx.index("bar.sync")].splitlines()
    loads = [i for i, line in enumerate(body) if re.search(r"ld\.global(\.nc)?\.v4\.u32", line)]
    first_row, copy = loads[:2 * ser.UNROLL], loads[2 * ser.UNROLL:]
    assert len(first_row) == 2 * ser.UNROLL
    if wide:
        stores = [i for i, line in enumerate(body) if "st.shared.v4.u32" in line]
        assert len(copy) == len(stores) == ser.COPY_LOADS and max(copy) < min(stores)
        assert max(first_row) < min(copy)
    else:
        narrow = [i for i, line in enumerate(body) if re.search(r"ld\.global(\.nc)?\.u16", line)]
        assert not copy and max(first_row) < min(narrow)
    assert "bar.sync" in ptx and ptx.count("shfl.sync.bfly") == 5 * n
    assert ptx.count("ld.global.v4.u32") + ptx.count("ld.global.nc.v4.u32") >= 2 * ser.UNROLL
    assert ".local" not in ptx
    use = offline.usage(report)
    assert use.spill_store_bytes == 0 and use.stack_bytes == 0, report


def test_shared_kernel_copies_a_staged_x_only_in_sixteen_byte_loads():
    with pytest.raises(ValueError, match="16-byte loads only"):
        ser._shared_kernel(8, True, 8, ser.UNROLL, False)


@pytest.mark.parametrize("cc", CCS, ids=str)
def test_densify_in_shared_kernel(cc):
    """Rows zeroed and copied out in 16-byte stores (shared and global), entries read 16 bytes at a time,
    warp barriers only."""
    ptx, report = offline.build(ser._densify_in_shared(ser.DENSIFY_WARPS), (U32, U32, U32) + (types.int64,) * 3, cc)
    assert "st.shared.v4.u32" in ptx and "st.global.v4.u32" in ptx and "ld.shared.v4.u32" in ptx
    assert "bar.sync" not in ptx and ptx.count("bar.warp.sync") == 2 and ".local" not in ptx   # a row is its warp's


@pytest.mark.parametrize("cc", CCS, ids=str)
def test_gather_order_kernel(cc):
    """One thread a row, its 33 bank counters and the group's choices in local memory (a few hundred bytes of
    stack, no spill); columns read as halves, orders written as int32."""
    i32 = types.Array(types.int32, 1, "C")
    ptx, report = offline.build(ser._gather_order_kernel, (U16, types.int64, types.int64, types.int64, i32, i32), cc)
    assert ("ld.global.u16" in ptx or "ld.global.nc.u16" in ptx) and "st.global.u32" in ptx
    assert "bar.sync" not in ptx                                       # no thread waits for another
    use = offline.usage(report)
    assert use.spill_store_bytes == 0, report


@pytest.mark.parametrize("cc", CCS, ids=str)
def test_permute_rows_kernel(cc):
    """A thread an entry: its order read, both 16-bit arrays gathered by it; no stack."""
    i32 = types.Array(types.int32, 1, "C")
    ptx, report = offline.build(ser._permute_rows, (U16, U16, i32, U16, U16, types.int64, types.int64), cc)
    assert ptx.count("st.global.u16") == 2 and ".local" not in ptx
    assert offline.usage(report).stack_bytes == 0, report


@pytest.mark.parametrize("cc", CCS, ids=str)
def test_read_rows_kernel(cc):
    """The memory floor's read: the product's 16-byte loads of values and columns (UNROLL chunks of each a lane),
    nothing else from global memory, no stack."""
    ptx, report = offline.build(ser._read_kernel(ser.UNROLL), (U32, U32, U32) + (types.int64,) * 2, cc)
    loads = ptx.count("ld.global.v4.u32") + ptx.count("ld.global.nc.v4.u32")
    assert loads >= 2 * ser.UNROLL and loads % 2 == 0                   # the compiler may unroll the chunk loop
    assert not re.search(r"ld\.global(\.nc)?\.(u|b)(16|32)\b", ptx) and ".local" not in ptx
    use = offline.usage(report)
    assert use.spill_store_bytes == 0 and use.stack_bytes == 0, report
