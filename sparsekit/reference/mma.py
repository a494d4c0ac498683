"""NumPy models of the tensor-core instructions that ``sparsekit/gpu/mma.py`` wraps: the executable specification of
their roundings and fragment layouts.

* :func:`tf32_round`: ``cvt.rna.tf32.f32`` (``to_tf32``), bit for bit;
* :func:`tf32_split`: the 3xTF32 split ``(big, small)`` of the lean float32 kernels, bit for bit as sm_90 computes it;
* :func:`bf16_bits`, :func:`bf16x2_bits`, :func:`bf16_pairs`: ``cvt.rn.bf16.f32`` and ``cvt.rn.bf16x2.f32``
  (``pack_bf16x2``), and the bf16 pairs the wgmma kernel's host-side split stores;
* :func:`fragment_coords`: which elements of A, B and C a lane holds in each register of ``mma.m16n8k16`` /
  ``mma.m16n8k8`` (the table in ``sparsekit/gpu/mma.py``'s docstring, from the PTX ISA);
* :func:`ldmatrix_expected`: the registers ``ldmatrix...x4.trans`` gives each lane for a 16x16 float16 tile.

The simulator fallbacks of ``sparsekit/gpu/mma.py`` compute with these models; the tests check the GPU's
instructions against them (``tests/mma_probes.py``).
"""
from __future__ import annotations

import functools

import numpy as np

__all__ = ["tf32_round", "tf32_split", "bf16_bits", "bf16x2_bits", "bf16_pairs", "fragment_coords",
           "ldmatrix_expected"]


def tf32_round(x):
    """NumPy model of ``cvt.rna.tf32.f32`` on a float32 scalar or array: add half a TF32 ulp
    (``0x1000``) to the magnitude bits and clear the low 13 bits (nearest, ties away from
    zero; a carry into the exponent is the correct rounding up, to infinity past the largest
    TF32); infinities and NaNs pass unchanged."""
    a = np.asarray(x, dtype=np.float32)
    bits = a.view(np.uint32)
    special = (bits & 0x7F800000) == 0x7F800000
    rounded = ((bits.astype(np.uint64) + 0x1000) & 0xFFFFE000).astype(np.uint32)
    out = np.where(special, bits, rounded).view(np.float32)
    return out if out.ndim else np.float32(out[()])


def tf32_split(x):
    """NumPy model of the lean float32 kernels' 3xTF32 split of float32 ``x`` (an array), bit for bit as
    sm_90 computes it: ``(big, small)`` with ``big = to_tf32_finite(x)`` (``(bits + 0x1000) & 0xFFFFE000``,
    wrapping) and ``small = cvt.rna.tf32.f32(x - big)``. For finite ``x`` the difference is exact and
    ``small`` is :func:`tf32_round` of it. For an infinite or NaN ``x`` the difference is an infinity or a
    NaN; a NaN comes out of the GPU's subtraction as ``0x7FFFFFFF`` and ptxas's ``cvt.rna`` (compare,
    add for finite values, mask) turns it into ``0x7FFFE000``, which ``small`` holds here (NumPy's NaN
    payloads differ; :func:`tf32_round` passes a NaN unchanged). ``sparsekit.gpu.uspmm_tc`` splits A's values
    with this once, on the host, so its scatter only moves bits."""
    a = np.asarray(x, dtype=np.float32)
    big = ((a.view(np.uint32).astype(np.uint64) + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)
    with np.errstate(invalid="ignore"):                                  # (inf - inf)
        diff = a - big
    small = np.where(np.isnan(diff), np.uint32(0x7FFFE000).view(np.float32), tf32_round(diff))
    return big, small.astype(np.float32)


def bf16_bits(x):
    """NumPy model of ``cvt.rn.bf16.f32`` on float32 ``x``: the bf16 bits (as uint32), nearest, ties to even;
    infinities pass, a NaN becomes ``0x7FFF`` (the canonical NaN)."""
    a = np.asarray(x, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    out = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32)
    return np.where(np.isnan(a), np.uint32(0x7FFF), out)


def bf16x2_bits(lo, hi):
    """NumPy model of ``cvt.rn.bf16x2.f32``: :func:`bf16_bits` of ``lo`` and ``hi`` in one uint32, ``lo`` in the low
    half."""
    return (bf16_bits(lo) | (bf16_bits(hi) << np.uint32(16))).astype(np.uint32)


def bf16_pairs(big, small):
    """:func:`bf16x2_bits` of ``(big, small)`` as float32: what :mod:`sparsekit.gpu.uspmm_wgmma`'s bf16-correction scatter
    stores for an entry (its bits only move)."""
    return bf16x2_bits(big, small).view(np.float32)


@functools.cache
def fragment_coords(shape: str, lane: int) -> dict:
    """``{register: [(row, col), ...]}`` of the fragment table in ``sparsekit/gpu/mma.py`` for ``shape``
    "m16n8k16" or "m16n8k8" (elements in register order: low half first). The tests build fragments with it."""
    g, t = lane // 4, lane % 4
    if shape == "m16n8k16":
        return {"a0": [(g, 2 * t), (g, 2 * t + 1)], "a1": [(g + 8, 2 * t), (g + 8, 2 * t + 1)],
                "a2": [(g, 2 * t + 8), (g, 2 * t + 9)], "a3": [(g + 8, 2 * t + 8), (g + 8, 2 * t + 9)],
                "b0": [(2 * t, g), (2 * t + 1, g)], "b1": [(2 * t + 8, g), (2 * t + 9, g)],
                "c": [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]}
    if shape == "m16n8k8":
        return {"a0": [(g, t)], "a1": [(g + 8, t)], "a2": [(g, t + 4)], "a3": [(g + 8, t + 4)],
                "b0": [(t, g)], "b1": [(t + 4, g)],
                "c": [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]}
    raise ValueError(f"shape: must be 'm16n8k16' or 'm16n8k8', got {shape!r}")


def ldmatrix_expected(tile: np.ndarray) -> np.ndarray:
    """What the ldmatrix probe of ``tests/mma_probes.py`` must return for a 16x16 float16 ``tile``: ``(32, 4)`` uint32, lane
    ``l`` register ``j`` = ``(T_j[2t, g], T_j[2t+1, g])`` (low half first), ``T_j`` the 8x8 tile ``j``
    (rows ``8 * (j % 2)``, columns ``8 * (j // 2)``)."""
    out = np.zeros((32, 4), dtype=np.uint32)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for j in range(4):
            sub = tile[8 * (j % 2): 8 * (j % 2) + 8, 8 * (j // 2): 8 * (j // 2) + 8]
            out[lane, j] = np.array([sub[2 * t, g], sub[2 * t + 1, g]], dtype=np.float16).view(np.uint32)[0]
    return out
