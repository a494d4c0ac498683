"""sparsekit/gpu/spmm_ell_compact.py compiles for sm_80 and sm_90 offline: a chunk read as one 16-byte load of
values, one 8-byte load of offsets and one 2-byte load of its base, the first row's chunks issued before the copy
of ``x`` (16-byte loads when ``wide``, else halves), ``x`` gathered from shared memory a half a slot, the warp
sum by five shuffles, no stack, and registers for two blocks of 16 warps an SM."""
from __future__ import annotations

import re

import pytest
from numba import types

from sparsekit import offline
from sparsekit.gpu import spmm_ell_compact as sec
from sparsekit.gpu import spmm_ell_rows as ser

CCS = [(8, 0), (9, 0)]
U16, U32 = (types.Array(t, 1, "C") for t in (types.uint16, types.uint32))
F16 = types.Array(types.float16, 1, "C")
VALUES, OFFSETS, BASES = r"ld\.global(\.nc)?\.v4\.u32", r"ld\.global(\.nc)?\.v2\.u32", r"ld\.global(\.nc)?\.u16"


def _lines(ptx: str, pattern: str) -> list[int]:
    return [i for i, line in enumerate(ptx.splitlines()) if re.search(pattern, line)]


@pytest.mark.parametrize("cc", CCS, ids=str)
@pytest.mark.parametrize("bf16, wide", [(False, False), (True, False), (False, True), (True, True)])
def test_kernel(cc, bf16, wide):
    args = (U32, U32, U16, U16, U32 if wide else U16, U16 if bf16 else F16) + (types.int64,) * 3
    ptx, report = offline.build(sec._kernel(bf16, sec.UNROLL, wide), args, cc)
    before = ptx[:ptx.index("bar.sync")]
    first_values, first_offsets = _lines(before, VALUES), _lines(before, OFFSETS)
    copy_loads = first_values[sec.UNROLL:]
    assert len(first_values) == sec.UNROLL + (ser.COPY_LOADS if wide else 0)   # the first row's chunks, the copy
    assert len(first_offsets) == sec.UNROLL and len(_lines(before, BASES)) >= sec.UNROLL
    if wide:
        stores = _lines(before, r"st\.shared\.v4\.u32")
        assert max(first_values[:sec.UNROLL] + first_offsets) < min(copy_loads) and max(copy_loads) < min(stores)
    else:
        halves = _lines(before, r"ld\.global(\.nc)?\.u16.*\[%rd\d+\];")
        assert len(halves) > sec.UNROLL and "st.shared.v4" not in before
    after = ptx[ptx.index("bar.sync"):]
    assert len(_lines(after, VALUES)) >= sec.UNROLL and len(_lines(after, OFFSETS)) >= sec.UNROLL
    assert len(_lines(after, BASES)) >= sec.UNROLL
    assert not re.search(r"ld\.global(\.nc)?\.(v2\.)?u8", ptx)            # offsets never byte by byte
    assert "ld.shared.u16" in ptx and ptx.count("shfl.sync.bfly") == 5 and ".local" not in ptx
    use = offline.usage(report)
    assert use.spill_store_bytes == 0 and use.stack_bytes == 0, report
    assert use.registers <= 64, report                                    # 2 x 512 threads fit 65536 registers
