"""sparsekit/gpu/spmm.py's ``spmm_coo`` and ``spmm_blocked_ell`` at real suite shapes on a real GPU: the default
(``config="auto"``: the CSR kernels on the same stored entries) and the formats' own kernels (``config=None``)
equal a float64 product within the float32 bound (float16: float32 sums rounded once); the default is
bit-identical across runs (no atomics)."""
from __future__ import annotations

import functools

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

# (M, K, N) from the DL SpMM suite (course slides, Table 1): problems 7 (N <= 64: float16 on tensor cores), 12, 9.
SHAPES = [(512, 2048, 49), (64, 32, 12544), (2048, 512, 256)]


@functools.cache
def problem(fmt: str, shape: tuple, dtype: str):
    """``(a, b, check)``: the suite matrix (COO) or a blocked-uniform one of its shape (4 x 4 blocks, BlockedELL)
    at 90 %, in ``dtype``, and the check of a result."""
    from sparsekit.bench.spmm import Checker, HalfCheck, suite_matrix
    from sparsekit.formats import COO, BlockedELL, convert
    from sparsekit.prune import blocked_uniform

    if fmt == "coo":
        csr, b, a = suite_matrix(*shape, 0.9)
        mat = convert(csr, COO)
    else:
        _, b, w = suite_matrix(*shape, 0.0)
        mat = BlockedELL.from_dense(w, blocked_uniform(w, 0.9, 4), block=4)
        a = mat.to_dense()
    if dtype == "float32":
        return mat, b, Checker(a, b)
    a16, b16 = a.astype(np.float16), b.astype(np.float16)
    mat16 = COO.from_dense(a16, mat.mask()) if fmt == "coo" else BlockedELL.from_dense(a16, mat.mask(), block=4)
    return mat16, b16, HalfCheck(a16, b16)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("fmt", ["coo", "blocked_ell"])
def test_default_and_own_kernel_correct_default_deterministic(fmt, shape, dtype):
    from numba import cuda

    from sparsekit.gpu import spmm as gs

    mat, b, check = problem(fmt, shape, dtype)
    spmm = getattr(gs, "spmm_" + fmt)
    dev = gs.prepare(mat, type(mat))
    b_dev = cuda.to_device(b)
    first = spmm(dev, b_dev).copy_to_host()
    assert check(first)
    assert np.array_equal(first.view(np.uint16), spmm(dev, b_dev).copy_to_host().view(np.uint16))
    assert check(spmm(dev, b_dev, config=None).copy_to_host())
