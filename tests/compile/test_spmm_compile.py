"""The SpMM baseline kernels (sparsekit/gpu/spmm.py) compile for sm_80 and sm_90 offline, float32 and float16, and the
CSR kernels for bfloat16 (uint16 bits: ``bf16=True``)."""
from __future__ import annotations

import re

import pytest
from numba import cuda, types

from sparsekit.gpu import spmm as gs

CCS = [(8, 0), (9, 0)]
VALUE_TYPES = [types.float32, types.float16]
#: The CSR kernels' element types: bfloat16 arrives as uint16 bits.
CSR_TYPES = [*VALUE_TYPES, types.uint16]


def mat(t, layout="C"):
    return types.Array(t, 2, layout)


def vec(t):
    return types.Array(t, 1, "C")


@pytest.mark.parametrize("cc", CCS)
@pytest.mark.parametrize("vt", CSR_TYPES)
@pytest.mark.parametrize("cols_per_lane", [1, 4])
def test_csr_compiles(cc, vt, cols_per_lane):
    sig = (vec(types.int32), vec(types.int32), vec(vt), vec(types.int32), mat(vt), mat(vt), types.int64, types.int64)
    ptx, _ = cuda.compile_ptx(gs._csr_kernel(cols_per_lane, vt == types.uint16).py_func, sig, cc=cc)
    assert f".target sm_{cc[0]}{cc[1]}" in ptx
    assert ("cvt.rn.bf16x2.f32" in ptx) == (vt == types.uint16)      # bfloat16: one rounding at the store


@pytest.mark.parametrize("cc", CCS)
@pytest.mark.parametrize("vt", CSR_TYPES)
@pytest.mark.parametrize("rows,wpr,cpl,vector,unroll", [(1, 4, 2, 4, 4), (4, 1, 1, 1, 4), (2, 2, 1, 2, 8)])
def test_staged_csr_uses_vector_loads_and_no_local_memory(cc, vt, rows, wpr, cpl, vector, unroll):
    """The staged kernel's B loads are ``vector`` wide (float32 x 4 = v4.f32, float16 x 4 = v2 of
    32-bit words), ``unroll`` of them per step, and its accumulators stay in registers."""
    sig = (vec(types.int32), vec(types.int32), vec(vt), vec(types.int32), vec(vt), mat(vt), types.int64, types.int64)
    ptx, _ = cuda.compile_ptx(gs._csr_split_kernel(rows, wpr, cpl, vector, unroll, vt == types.uint16).py_func, sig,
                              cc=cc)
    assert ".local" not in ptx and "bar.sync" in ptx
    nbytes = vector * (4 if vt == types.float32 else 2)
    wide = {16: r"ld\.global\.v4\.(f32|u32|b32)", 8: r"ld\.global\.v2\.(f32|u32|b32)"}.get(nbytes)
    if wide:
        assert len(re.findall(wide, ptx)) == unroll * cpl       # one vector load per entry and column slice
    else:
        assert not re.search(r"ld\.global\.v[24]", ptx)


@pytest.mark.parametrize("cc", CCS)
@pytest.mark.parametrize("vt", VALUE_TYPES)
def test_coo_compiles_with_float32_atomics(cc, vt):
    sig = (vec(types.int32), vec(types.int32), vec(vt), mat(vt), mat(types.float32), types.int64, types.int64)
    ptx, _ = cuda.compile_ptx(gs._coo_kernel.py_func, sig, cc=cc)
    assert "red.global.add.f32" in ptx or "atom.global.add.f32" in ptx
    cast, _ = cuda.compile_ptx(gs._cast_kernel.py_func, (mat(types.float32), mat(vt)), cc=cc)
    assert f".target sm_{cc[0]}{cc[1]}" in cast


@pytest.mark.parametrize("cc", CCS)
@pytest.mark.parametrize("vt", VALUE_TYPES)
@pytest.mark.parametrize("it", [types.int16, types.int32])
def test_blocked_ell_compiles(cc, vt, it):
    sig = (types.Array(vt, 4, "C"), mat(it), mat(vt), mat(vt), types.int64, types.int64, types.int64)
    ptx, _ = cuda.compile_ptx(gs._blocked_ell_kernel.py_func, sig, cc=cc)
    assert f".target sm_{cc[0]}{cc[1]}" in ptx
    zero, _ = cuda.compile_ptx(gs._zero_kernel.py_func, (mat(types.float32),), cc=cc)
    assert "st.global" in zero
