"""SpMM tolerances of the tests: the teaching track's (sums in the dtype) and half precision's (float32 sums, one rounding)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

#: float32's unit roundoff: the tensor cores and the references sum in float32.
U32 = 2.0 ** -24


def assert_spmm_close(got: np.ndarray, want: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """``got`` (``a @ b`` summed in its own dtype, in any order) vs the float64-accumulated ``want``.

    A sum of k products in a dtype with unit roundoff u errs by at most about
    k * u * (|A| @ |B|) (Higham, "Accuracy and Stability of Numerical
    Algorithms", eq. 3.5); the reference is rounded once more to the dtype
    (u * |C|). The bound is defined here once, per dtype through ``eps``, and
    scaled by the reduction length k = a.shape[1].
    """
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    u = np.finfo(got.dtype).eps / 2
    k = a.shape[1]
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    bound = (k + 1) * u * scale + u * np.abs(want.astype(np.float64))
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert (err <= bound).all(), f"max excess error {np.max(err - bound):.3g}"


def assert_half_close(got, want, a_dense, b):
    """Half precision: ``got`` vs ``want`` (both ``a_dense @ b`` rounded once to the 16-bit dtype; ``b`` is ``K x N``)."""
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    info = ml_dtypes.finfo(want.dtype)
    a64, b64 = a_dense.astype(np.float64), b.astype(np.float64)
    exact = a64 @ b64
    bound = (2 * a_dense.shape[1] * U32 * (np.abs(a64) @ np.abs(b64)) + float(info.eps) * np.abs(exact)
             + float(info.smallest_subnormal))
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert (err <= bound).all(), f"max excess error {np.max(err - bound):.3g}"
