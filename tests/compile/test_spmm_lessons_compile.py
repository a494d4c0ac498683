"""Every lesson kernel of sparsekit/gpu/spmm_lessons.py compiles for sm_80 and sm_90 offline, and the
PTX shows what each lesson claims (shared-memory staging, atomics, where ACC lives)."""
from __future__ import annotations

import re

import pytest
from numba import cuda, types

from sparsekit.gpu import spmm_lessons as les

CCS = [(8, 0), (9, 0)]
I32 = types.Array(types.int32, 1, "C")
F32 = types.Array(types.float32, 1, "C")
MAT = types.Array(types.float32, 2, "C")
I64 = types.int64
CSR_ARGS = (I32, I32, F32, MAT, MAT, I64, I64)


def ptx_of(kernel, argtypes, cc):
    ptx, _ = cuda.compile_ptx(kernel.py_func, argtypes, cc=cc)
    assert f".target sm_{cc[0]}{cc[1]}" in ptx
    return ptx


@pytest.mark.parametrize("cc", CCS)
@pytest.mark.parametrize("kernel", [les._thread_per_row_kernel, les._warp_per_row_kernel])
def test_steps_1_and_2_compile_without_shared_memory(cc, kernel):
    ptx = ptx_of(kernel, CSR_ARGS, cc)
    assert "bar.sync" not in ptx and ".shared" not in ptx


@pytest.mark.parametrize("cc", CCS)
def test_step_6_balanced_blocks_compiles(cc):
    ptx = ptx_of(les._balanced_blocks_kernel, (I32,) + CSR_ARGS, cc)
    assert "bar.sync" not in ptx


@pytest.mark.parametrize("cc", CCS)
def test_step_4_swizzle_compiles(cc):
    ptx = ptx_of(les._warp_per_row_swizzled_kernel, (I32,) + CSR_ARGS, cc)
    assert "bar.sync" not in ptx


@pytest.mark.parametrize("cc", CCS)
@pytest.mark.parametrize("nwarps,rows_per_warp,tile_k", [(4, 2, 32), (8, 1, 64), (2, 4, 16)])
def test_step_3_stages_b_in_shared_memory(cc, nwarps, rows_per_warp, tile_k):
    ptx = ptx_of(les._smem_tiled_kernel(nwarps, rows_per_warp, tile_k), (I32,) + CSR_ARGS + (I64,), cc)
    assert "st.shared.f32" in ptx and "ld.shared.f32" in ptx and "bar.sync" in ptx
    assert ".local" not in ptx            # acc[] and cursor[] (static indices, unrolled) live in registers


@pytest.mark.parametrize("cc", CCS)
@pytest.mark.parametrize("groups", [1, 4, 8])
def test_step_5_algorithm_3_uses_atomics(cc, groups):
    args = (types.Array(types.int32, 2, "C"), I32, F32, MAT, MAT, I64, I64, I64, I64)
    ptx = ptx_of(les._thread_group_kernel(groups), args, cc)
    assert re.search(r"atom\.shared\.add\.f32|red\.shared\.add\.f32", ptx)   # groups meet in shared memory
    assert re.search(r"atom\.global\.add\.f32|red\.global\.add\.f32", ptx)   # the tile is added into C
    # ACC[a] is indexed by a row read from memory, so it cannot stay in registers: the
    # price of a generic kernel that SparseRT's generated code (constant rows) does not pay.
    assert ".local" in ptx


@pytest.mark.parametrize("cc", CCS)
@pytest.mark.parametrize("warps_per_row", [1, 4])
def test_step_7_row_split_stages_the_row_in_shared_memory(cc, warps_per_row):
    ptx = ptx_of(les._row_split_kernel(warps_per_row), (I32,) + CSR_ARGS, cc)
    assert "st.shared.u32" in ptx or "st.shared.b32" in ptx             # staged column indices
    assert "st.shared.f32" in ptx and "ld.shared.f32" in ptx and "bar.sync" in ptx
    assert ".local" not in ptx
