"""sparsekit/gpu/spmm.py's CSR kernels at real suite shapes on a real GPU: the warp-per-row kernel and the
staged kernel (several warps per row, vector loads) equal a float64 product within the float32
bound, are bit-identical across runs (no atomics), and keep PyTorch inputs on the device."""
from __future__ import annotations

import functools

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

# (M, K, N) from the DL SpMM suite (course slides, Table 1): problems 7, 10, 5 (K >= 512) and 12.
SHAPES = [(512, 2048, 49), (512, 2048, 256), (256, 1024, 196), (64, 32, 12544)]
CONFIGS = {
    "warp per row": dict(swizzle=True),
    "warp per row cpl=4": dict(swizzle=True, cols_per_lane=4),
    "staged wpr=1 wpb=4": dict(swizzle=True, warps_per_row=1, warps_per_block=4),
    "staged wpr=4 wpb=8 cpl=2": dict(swizzle=True, warps_per_row=4, warps_per_block=8, cols_per_lane=2),
    "staged wpr=8 wpb=8 unroll=8": dict(swizzle=False, warps_per_row=8, warps_per_block=8, unroll=8),
    "staged wpr=2 wpb=4 vec=4": dict(swizzle=True, warps_per_row=2, warps_per_block=4, vector=4),
    "staged wpr=4 wpb=8 vec=4 cpl=2": dict(swizzle=True, warps_per_row=4, warps_per_block=8, vector=4,
                                           cols_per_lane=2),
}
# Vector loads need N divisible by the vector width (the launcher refuses the others).
CASES = [(shape, name) for shape in SHAPES for name, kw in CONFIGS.items() if shape[2] % kw.get("vector", 1) == 0]


@functools.cache
def problem(shape):
    from sparsekit.bench.spmm import Checker, suite_matrix

    csr, b, a = suite_matrix(*shape, 0.9)
    return csr, b, a, Checker(a, b)


@pytest.mark.parametrize("shape,name", CASES, ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else x)
def test_csr_correct_and_deterministic(shape, name):
    from numba import cuda

    from sparsekit.gpu import spmm as gs
    from sparsekit.formats import CSR

    csr, b, _, check = problem(shape)
    dev = gs.prepare(csr, CSR)
    b_dev = cuda.to_device(b)
    first = gs.spmm_csr(dev, b_dev, **CONFIGS[name]).copy_to_host()
    assert check(first)
    assert np.array_equal(first, gs.spmm_csr(dev, b_dev, **CONFIGS[name]).copy_to_host())


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_staged_torch_in_torch_out(shape):
    torch = pytest.importorskip("torch")
    from sparsekit.gpu import spmm as gs

    csr, b, _, check = problem(shape)
    tb = torch.as_tensor(b, device="cuda")
    out = gs.spmm_csr(csr, tb, warps_per_row=4, warps_per_block=8, swizzle=True)
    assert isinstance(out, torch.Tensor) and out.device == tb.device
    assert check(out.cpu().numpy())


@pytest.mark.parametrize("shape", SHAPES[1:], ids=lambda s: "x".join(map(str, s)))
def test_staged_float16(shape):
    from sparsekit.gpu import spmm as gs
    from sparsekit.reference.spmm import spmm_csr
    from sparsekit.formats import CSR
    from tests.test_spmm import assert_fp32_accumulated

    csr, b, a, _ = problem(shape)
    h = CSR(csr.indptr, csr.indices, csr.data.astype(np.float16), csr.shape)
    b16 = b.astype(np.float16)
    got = gs.spmm_csr(h, b16, warps_per_row=2, warps_per_block=4, vector=4, swizzle=True)
    assert_fp32_accumulated(got, spmm_csr(h, b16), h.to_dense(), b16, reduction=int(np.diff(h.indptr).max()))


def test_vector_load_refuses_misaligned_b():
    from numba import cuda

    from sparsekit.gpu import spmm as gs
    from sparsekit.formats import CSR

    a = CSR.from_dense(np.eye(3, dtype=np.float32))
    flat = cuda.to_device(np.ones(13, np.float32))
    b = flat[1:].reshape(3, 4)                       # C-contiguous, 4 bytes past a 16-byte boundary
    with pytest.raises(ValueError, match="vector: b's first element must be aligned to 16 bytes"):
        gs.spmm_csr(a, b, vector=4)
    assert np.array_equal(gs.spmm_csr(a, b, vector=1, warps_per_row=2).copy_to_host(), np.ones((3, 4)))
