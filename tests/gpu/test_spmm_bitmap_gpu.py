"""sparsekit/gpu/spmm_bitmap.py on a real GPU: both forms, float16 and bfloat16, N from 1 to 64, default and
explicit tunables (slices and splits of K, ring lengths), against the float32 product of the same operands; repeated runs
bit-identical (the slices' and splits' partials are added in a fixed order); PyTorch tensors in, a tensor
out."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from sparsekit.formats import TiledBitmap
from spmm_close import assert_half_close

pytestmark = pytest.mark.gpu

BF16 = np.dtype(ml_dtypes.bfloat16)


def pruned(m, k, sparsity, dtype, seed=0):
    """A random ``m x k`` weight with a fraction ``sparsity`` of its entries zero, unstructured."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((m, k)).astype(dtype)
    return np.where(rng.random((m, k)) < sparsity, np.zeros((), dtype), w).astype(dtype)


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=str)
@pytest.mark.parametrize("sparsity", [0.5, 0.8, 0.97])
@pytest.mark.parametrize("n", [1, 8, 13, 32, 64])
@pytest.mark.parametrize("linear", [True, False])
def test_matches_reference_and_repeats(dtype, sparsity, n, linear):
    """K = 3000 cuts the last 32-column group (X staged with zero columns); 1,000 rows cut the last row block."""
    from sparsekit.gpu import spmm_bitmap as gb
    from sparsekit.reference import spmm_bitmap as rb
    w = pruned(1000, 3000, sparsity, dtype, seed=n)
    dev = gb.prepare(TiledBitmap.from_dense(w))
    b = np.random.default_rng(1).standard_normal((3000, n)).astype(dtype)
    if linear:
        x = np.ascontiguousarray(b.T)
        got, again, want = gb.spmm_bitmap_linear(dev, x), gb.spmm_bitmap_linear(dev, x), rb.spmm_bitmap_linear(dev.host, x)
        got, again, want = got.T, again.T, want.T
    else:
        got, again, want = gb.spmm_bitmap(dev, b), gb.spmm_bitmap(dev, b), rb.spmm_bitmap(dev.host, b)
    assert_half_close(got, want, w, b)
    assert (got.view(np.uint16) == again.view(np.uint16)).all()


@pytest.mark.parametrize("tunables", [dict(rows=1, slices=1, splits=1), dict(rows=2, slices=4, splits=3),
                                      dict(rows=8, slices=1, splits=16), dict(rows=4, slices=2, splits=40),
                                      dict(rows=2, slices=2, splits=5, stages=8)], ids=str)
def test_tunables(tunables):
    from sparsekit.gpu import spmm_bitmap as gb
    from sparsekit.reference import spmm_bitmap as rb
    w = pruned(512, 4096, 0.8, BF16, seed=3)
    dev = gb.prepare(TiledBitmap.from_dense(w))
    x = np.random.default_rng(2).standard_normal((16, 4096)).astype(BF16)
    got = gb.spmm_bitmap_linear(dev, x, **tunables)
    assert_half_close(got.T, rb.spmm_bitmap_linear(dev.host, x).T, w, np.ascontiguousarray(x.T))


def test_torch_tensors():
    torch = pytest.importorskip("torch")
    from sparsekit.gpu import spmm_bitmap as gb
    from sparsekit.reference import spmm_bitmap as rb
    w = pruned(256, 512, 0.7, BF16, seed=4)
    dev = gb.prepare(TiledBitmap.from_dense(w))
    x = torch.randn(8, 512, device="cuda", dtype=torch.bfloat16)
    y = gb.spmm_bitmap_linear(dev, x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and y.shape == (8, 256)
    xn = x.view(torch.int16).cpu().numpy().view(BF16)
    want = rb.spmm_bitmap_linear(dev.host, xn)
    assert_half_close(y.view(torch.int16).cpu().numpy().view(BF16).T, want.T, w, np.ascontiguousarray(xn.T))
