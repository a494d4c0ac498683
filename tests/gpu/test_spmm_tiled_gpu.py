"""sparsekit/gpu/spmm_tiled.py on a real GPU at decode shapes: both kernels, both forms, float16 and bfloat16, against
the float32 reference; repeated runs bit-identical (the split-K partials are added in split order); inputs
as NumPy arrays and as PyTorch tensors (the result comes back as a tensor, no copy)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from sparsekit.formats import TiledCSL

pytestmark = pytest.mark.gpu

BF16 = np.dtype(ml_dtypes.bfloat16)


def weight(m, k, sparsity, dtype, seed=0):
    rng = np.random.default_rng(seed)
    kp = round(k * (1 - sparsity))
    cols = np.argpartition(rng.random((m, k), dtype=np.float32), kp, axis=1)[:, :kp]
    rows = np.repeat(np.arange(m), kp)
    return rows, cols.ravel(), rng.standard_normal(rows.size).astype(dtype)


def check(got, a, b):
    """Within float32 accumulation of the exact product, rounded once to the 16-bit dtype."""
    info = ml_dtypes.finfo(a.dtype)
    dense = a.to_dense().astype(np.float64)
    exact = dense @ b.astype(np.float64)
    bound = 2 * a.shape[1] * 2.0 ** -24 * (np.abs(dense) @ np.abs(b.astype(np.float64))) + float(info.eps) * np.abs(exact)
    assert (np.abs(got.astype(np.float64) - exact) <= bound + float(info.smallest_subnormal)).all()


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=str)
@pytest.mark.parametrize("tile, rows_per_warp", [(None, None), ((64, 64), 32), ((64, 64), 16), ((32, 128), 32)],
                         ids=str)
@pytest.mark.parametrize("n", [1, 8, 13, 32, 64])
def test_matches_reference_and_repeats(dtype, tile, rows_per_warp, n):
    """K = 3000 cuts the last tile (the 16-byte copies of B zero-fill past K); 80 % uniform sparsity."""
    from sparsekit.gpu import spmm_tiled as gt
    m, k = 1000, 3000
    rows, cols, vals = weight(m, k, 0.8, dtype)
    a = TiledCSL.from_coords(rows, cols, vals, (m, k), tile=TiledCSL.row_tile(k) if tile is None else tile)
    dev = gt.prepare(a)
    tunables = {} if tile is None else dict(rows_per_warp=rows_per_warp)
    b = np.random.default_rng(n).standard_normal((k, n)).astype(dtype)
    first = gt.spmm_tiled(dev, b, **tunables)
    check(first, a, b)
    assert (gt.spmm_tiled(dev, b, **tunables).view(np.uint16) == first.view(np.uint16)).all()
    lin = gt.spmm_tiled_linear(dev, np.ascontiguousarray(b.T), **tunables)
    check(lin.T, a, b)
    assert (gt.spmm_tiled_linear(dev, np.ascontiguousarray(b.T), **tunables).view(np.uint16)
            == lin.view(np.uint16)).all()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_tensors_in_and_out(dtype):
    torch = pytest.importorskip("torch", reason="PyTorch is an optional extra")
    from sparsekit.gpu import spmm_tiled as gt
    nd = np.dtype(np.float16) if dtype == "float16" else BF16
    m, k = 512, 1024
    a = TiledCSL.from_coords(*weight(m, k, 0.7, nd), (m, k), tile=TiledCSL.row_tile(k))
    x = torch.randn(4, k, device="cuda", dtype=getattr(torch, dtype))
    y = gt.spmm_tiled_linear(gt.prepare(a), x)
    assert isinstance(y, torch.Tensor) and y.dtype == x.dtype and y.shape == (4, m) and y.is_cuda
    want = x.float() @ torch.from_numpy(a.to_dense().astype(np.float32)).cuda().t()
    assert torch.allclose(y.float(), want, rtol=2 ** -7, atol=1e-2)
