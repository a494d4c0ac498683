"""The one SpMM tolerance of the teaching-track tests (CPU, GPU lessons, specialisation, conv)."""
from __future__ import annotations

import numpy as np


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
