"""Sparse R x S convolution on the CPU (Numba): im2col + SpMM, and im2col kept virtual.

Equals ``sparsekit/reference/conv.py`` (same layouts: one image ``x`` of shape
``(C, H, W)``, stride 1, zero ``padding``; the filter as a CSR matrix
``K x (C*R*S)``, column ``c*R*S + r*S + s``); ``tests/test_conv.py`` checks
each function against :func:`sparsekit.reference.conv.conv2d_direct`.

``conv2d_im2col``
    the slides' method: materialise ``B = im2col(x)`` (``C*R*S`` rows of
    ``H'*W'``), then the CSR SpMM ``sparsekit.cpu.spmm.spmm_csr`` (Gustavson order).
``conv2d_virtual``
    SparseRT's "virtual" dense matrix (slides, "Supporting Convolutions"):
    row ``c*R*S + r*S + s`` of ``B`` is the padded image shifted by ``(r, s)``,
    so each nonzero ``w[k, c, r, s]`` adds ``w * xpad[c, r:r+H', s:s+W']`` to
    output channel ``k`` straight from the image, and ``B`` never exists.
``conv2d_dense``
    the baseline: im2col + dense GEMM (NumPy's BLAS, ``np.matmul``).

float32 or float64 (Numba's CPU backend has no float16 arithmetic).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from sparsekit.cpu.spmm import CPU_DTYPES, spmm_csr
from sparsekit.reference.conv import output_size
from sparsekit.checks import check_array, check_int

__all__ = ["im2col", "conv2d_im2col", "conv2d_virtual", "conv2d_dense"]


@njit(cache=True)
def _im2col(xp, r, s, ho, wo, out):
    c = xp.shape[0]
    for ch in range(c):
        for dr in range(r):
            for ds in range(s):
                row = out[(ch * r + dr) * s + ds]
                for i in range(ho):
                    src = xp[ch, i + dr, ds:ds + wo]
                    dst = row[i * wo:(i + 1) * wo]
                    for j in range(wo):
                        dst[j] = src[j]


@njit(parallel=True, cache=True)
def _virtual(indptr, indices, data, xp, r, s, ho, wo, out):
    # Output channel k (a row of A) per thread; each nonzero adds a shifted image window.
    for k in prange(out.shape[0]):
        for p in range(indptr[k], indptr[k + 1]):
            col = indices[p]
            ch = col // (r * s)
            dr = (col // s) % r
            ds = col % s
            v = data[p]
            for i in range(ho):
                src = xp[ch, i + dr, ds:ds + wo]
                dst = out[k, i]
                for j in range(wo):
                    dst[j] += v * src[j]


def _checks(x, r, s, padding):
    check_array(x, "x", ndim=3)
    if x.dtype not in CPU_DTYPES:
        raise TypeError(f"x: the CPU kernels compute in float32 or float64, got {x.dtype}")
    r = check_int(r, "r", minimum=1)
    s = check_int(s, "s", minimum=1)
    p = check_int(padding, "padding", minimum=0)
    ho, wo = output_size(x.shape[1], x.shape[2], r, s, p)
    xp = np.pad(x, ((0, 0), (p, p), (p, p)))
    return r, s, ho, wo, xp


def _check_filter(w_csr, x, r, s):
    want = x.shape[0] * r * s
    if tuple(w_csr.shape)[1] != want:
        raise ValueError(f"w_csr: expected {want} columns (C*R*S = {x.shape[0]}*{r}*{s}), "
                         f"got shape {tuple(w_csr.shape)}")
    if w_csr.data.dtype != x.dtype:
        raise TypeError(f"w_csr: values dtype must equal x's dtype {x.dtype}, got {w_csr.data.dtype}")


def im2col(x: np.ndarray, r: int = 3, s: int = 3, *, padding: int = 1) -> np.ndarray:
    """``(C*R*S) x (H'*W')``: equals :func:`sparsekit.reference.conv.im2col` exactly (it only copies)."""
    r, s, ho, wo, xp = _checks(x, r, s, padding)
    out = np.empty((x.shape[0] * r * s, ho * wo), dtype=x.dtype)
    _im2col(xp, r, s, ho, wo, out)
    return out


def conv2d_im2col(w_csr, x: np.ndarray, r: int = 3, s: int = 3, *, padding: int = 1,
                  parallel: bool = True) -> np.ndarray:
    """im2col, then CSR SpMM (``sparsekit.cpu.spmm.spmm_csr``, Gustavson order); ``(K, H', W')``."""
    r, s, ho, wo, _ = _checks(x, r, s, padding)
    _check_filter(w_csr, x, r, s)
    return spmm_csr(w_csr, im2col(x, r, s, padding=padding), parallel=parallel).reshape(-1, ho, wo)


def conv2d_virtual(w_csr, x: np.ndarray, r: int = 3, s: int = 3, *, padding: int = 1) -> np.ndarray:
    """The same convolution with im2col left virtual (parallel over output channels)."""
    r, s, ho, wo, xp = _checks(x, r, s, padding)
    _check_filter(w_csr, x, r, s)
    out = np.zeros((w_csr.shape[0], ho, wo), dtype=x.dtype)
    _virtual(w_csr.indptr, w_csr.indices, w_csr.data, xp, r, s, ho, wo, out)
    return out


def conv2d_dense(w: np.ndarray, x: np.ndarray, *, padding: int = 1) -> np.ndarray:
    """Baseline: im2col + dense GEMM through NumPy's BLAS; ``w`` is ``(K, C, R, S)``."""
    check_array(w, "w", ndim=4, shape=(None, x.shape[0] if np.ndim(x) == 3 else None, None, None))
    kk, _, r, s = w.shape
    _, _, ho, wo, _ = _checks(x, r, s, padding)
    if w.dtype != x.dtype:
        raise TypeError(f"w: dtype must equal x's dtype {x.dtype}, got {w.dtype}")
    return (w.reshape(kk, -1) @ im2col(x, r, s, padding=padding)).reshape(kk, ho, wo)
