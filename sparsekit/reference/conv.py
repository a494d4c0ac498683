"""Reference 3x3 (any R x S) convolution, stride 1: direct, and as im2col + SpMM.

The executable specification of ``sparsekit/cpu/conv.py`` (same function names). The
course slides ("Supporting Convolutions", Table 3; ../shared/papers/spmm-course-slides.txt)
turn a sparse 3x3 convolution into SpMM with im2col: the filter ``w``
(``K x C x R x S``) flattened to ``K x (C*R*S)`` is the sparse ``A``, and the
input replicated into ``B = im2col(x)`` (``(C*R*S) x (H*W)``) is the dense one.

Layouts: one image ``x`` of shape ``(C, H, W)`` (batch 1, as in the slides),
zero ``padding`` on each side, stride 1, so the output is ``(K, H', W')`` with
``H' = H + 2*padding - R + 1``. Row ``c*R*S + r*S + s`` of ``im2col(x)`` holds
``xpad[c, r:r+H', s:s+W']`` flattened, matching ``w.reshape(K, C*R*S)``.
Sums are taken in float64 and rounded once to ``x.dtype``.
"""
from __future__ import annotations

import numpy as np

from sparsekit.reference.spmm import spmm_csr
from sparsekit.checks import check_array, check_int

__all__ = ["conv2d_direct", "im2col", "conv2d_im2col", "output_size"]


def output_size(h: int, w: int, r: int, s: int, padding: int) -> tuple[int, int]:
    """``(H', W')`` of a stride-1 convolution; each must be at least 1."""
    ho, wo = h + 2 * padding - r + 1, w + 2 * padding - s + 1
    if ho < 1 or wo < 1:
        raise ValueError(f"x: a {r}x{s} filter with padding {padding} needs an image of at least "
                         f"{r - 2 * padding}x{s - 2 * padding}, got {h}x{w}")
    return ho, wo


def _pad(x: np.ndarray, padding: int) -> np.ndarray:
    return np.pad(x, ((0, 0), (padding, padding), (padding, padding)))


def conv2d_direct(x: np.ndarray, w: np.ndarray, *, padding: int = 1) -> np.ndarray:
    """``out[k, i, j] = sum over c, r, s of w[k, c, r, s] * xpad[c, i + r, j + s]`` (dense, direct)."""
    check_array(x, "x", ndim=3)
    check_array(w, "w", ndim=4, shape=(None, x.shape[0], None, None))
    if w.dtype != x.dtype:
        raise TypeError(f"w: dtype must equal x's dtype {x.dtype}, got {w.dtype}")
    p = check_int(padding, "padding", minimum=0)
    kk, c, r, s = w.shape
    ho, wo = output_size(x.shape[1], x.shape[2], r, s, p)
    xp = _pad(x.astype(np.float64), p)
    out = np.zeros((kk, ho, wo), dtype=np.float64)
    for dr in range(r):
        for ds in range(s):
            # one filter tap: a (K x C) matrix times the shifted image
            out += np.einsum("kc,chw->khw", w[:, :, dr, ds].astype(np.float64), xp[:, dr:dr + ho, ds:ds + wo])
    return out.astype(x.dtype)


def im2col(x: np.ndarray, r: int = 3, s: int = 3, *, padding: int = 1) -> np.ndarray:
    """The ``(C*R*S) x (H'*W')`` matrix whose row ``c*R*S + dr*S + ds`` is the image shifted by (dr, ds)."""
    check_array(x, "x", ndim=3)
    r = check_int(r, "r", minimum=1)
    s = check_int(s, "s", minimum=1)
    p = check_int(padding, "padding", minimum=0)
    c = x.shape[0]
    ho, wo = output_size(x.shape[1], x.shape[2], r, s, p)
    xp = _pad(x, p)
    cols = np.empty((c, r, s, ho * wo), dtype=x.dtype)
    for dr in range(r):
        for ds in range(s):
            cols[:, dr, ds] = xp[:, dr:dr + ho, ds:ds + wo].reshape(c, -1)
    return cols.reshape(c * r * s, ho * wo)


def conv2d_im2col(w_csr, x: np.ndarray, r: int = 3, s: int = 3, *, padding: int = 1) -> np.ndarray:
    """The sparse convolution as SpMM: ``spmm_csr(w_csr, im2col(x))`` reshaped to ``(K, H', W')``.

    ``w_csr`` is the filter flattened to ``K x (C*R*S)`` in CSR.
    """
    check_array(x, "x", ndim=3)
    c = x.shape[0]
    if tuple(w_csr.shape)[1] != c * r * s:
        raise ValueError(f"w_csr: expected {c * r * s} columns (C*R*S = {c}*{r}*{s}), got shape {tuple(w_csr.shape)}")
    ho, wo = output_size(x.shape[1], x.shape[2], r, s, padding)
    return spmm_csr(w_csr, im2col(x, r, s, padding=padding)).reshape(w_csr.shape[0], ho, wo)
