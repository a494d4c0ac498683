"""USpMM's warp_split variant at the edge of its 32-bit offsets into B: the largest B it takes (K * N just
below 2**31 elements, 8 GiB of float32) gives the right rows where the offsets are largest, and one column
more is refused before anything is allocated (docs/limits.md)."""
from __future__ import annotations

import numpy as np
import pytest

from sparsekit.gpu.launch import INT32_MAX
from sparsekit import formats

pytestmark = pytest.mark.gpu
K, N = 2**20 - 1, 2**11              # K * N = 2**31 - 2**11 <= INT32_MAX
ROWS, KPRIME = 64, 8


def _ell(rng) -> formats.ELL:
    """ROWS rows of KPRIME entries; half the rows hold the last columns of B (the largest offsets)."""
    cols = np.stack([rng.choice(K, KPRIME, replace=False) if r % 2 else K - 1 - rng.choice(64, KPRIME, replace=False)
                     for r in range(ROWS)])
    values = rng.standard_normal((ROWS, KPRIME)).astype(np.float32)
    order = np.argsort(cols, axis=1)
    return formats.ELL(np.asfortranarray(np.take_along_axis(values, order, 1)),
                       np.asfortranarray(np.take_along_axis(cols, order, 1).astype(np.int32)), (ROWS, K))


def test_largest_b_is_right_where_the_offsets_are_largest():
    torch = pytest.importorskip("torch", reason="fills 8 GiB on the device")
    from sparsekit.gpu import uspmm

    assert K * N <= INT32_MAX < K * (N + 1)
    ell = _ell(np.random.default_rng(0))
    b = torch.randn(K, N, device="cuda", dtype=torch.float32, generator=torch.Generator("cuda").manual_seed(0))
    got = uspmm.uspmm(ell, b, variant="warp_split").cpu().numpy()
    used = np.unique(ell.indices)
    rows_of_b = b[torch.as_tensor(used.astype(np.int64), device="cuda")].cpu().numpy().astype(np.float64)
    at = np.searchsorted(used, ell.indices)                                  # (ROWS, KPRIME) rows of rows_of_b
    terms = ell.values.astype(np.float64)[:, :, None] * rows_of_b[at]        # (ROWS, KPRIME, N)
    want = terms.sum(axis=1)
    # float32 products summed in float32: within gamma_(KPRIME + 1) of the sum of |terms| (unit roundoff 2**-24)
    bound = (KPRIME + 1) * 2.0**-24 * np.abs(terms).sum(axis=1) + 1e-30
    assert (np.abs(got - want) <= bound).all()
    del b
    torch.cuda.empty_cache()


def test_one_column_more_is_refused_before_allocating():
    torch = pytest.importorskip("torch")
    from sparsekit.gpu import uspmm

    b = torch.empty(K, N + 1, device="cuda", dtype=torch.float32)
    free = torch.cuda.mem_get_info()[0]
    with pytest.raises(ValueError, match=r"b: at most 2\*\*31 - 1 = 2147483647 elements \(K \* N\)"):
        uspmm.uspmm(_ell(np.random.default_rng(1)), b, variant="warp_split")
    assert torch.cuda.mem_get_info()[0] >= free - (64 << 20)
