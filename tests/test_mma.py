"""sparsekit/gpu/mma.py under the CUDA simulator against its NumPy models (sparsekit/reference/mma.py): the TF32 and
bf16 roundings and the MMA fallbacks.

The fallbacks gather the warp's fragments and give each lane exactly its own elements of
``D = A @ B + C`` (fragment layout of the PTX ISA, :func:`sparsekit.reference.mma.fragment_coords`); the probe
kernels (one MMA per warp) load fragments from row-major tiles, so a wrong layout in either
the probes or the fallbacks shows up as a wrong product. The same probes run the real
instructions in ``tests/gpu/test_uspmm_tc_gpu.py``.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mma_probes
from sparsekit.reference import mma as ref_mma
from strategies import dense_arrays


def tf32_nearest_away(x: np.float32) -> np.float32:
    """Independent model of cvt.rna.tf32.f32 for a finite float32: of the two TF32 values around
    ``x`` (its bits with the low 13 cleared, and one TF32 step further from zero), the nearer in
    exact arithmetic; a tie goes away from zero."""
    bits = int(np.float32(x).view(np.uint32))
    down = bits & ~0x1FFF
    up = down + 0x2000                                   # may carry into the exponent (or reach inf)
    lo, hi = (np.uint32(v).view(np.float32) for v in (down, up))
    if not np.isfinite(hi):
        # past the largest TF32: infinity from half a TF32 step (2**116) above it
        return hi if abs(Fraction(float(x)) - Fraction(float(lo))) >= Fraction(2) ** 116 else lo
    dl, dh = abs(Fraction(float(x)) - Fraction(float(lo))), abs(Fraction(float(hi)) - Fraction(float(x)))
    return hi if dh <= dl else lo


@given(bits=st.integers(0, 2**32 - 1))
def test_tf32_round_is_nearest_ties_away(bits):
    x = np.uint32(bits).view(np.float32)
    got = ref_mma.tf32_round(x)
    if not np.isfinite(x):
        assert np.uint32(got.view(np.uint32)) == bits                 # inf / NaN unchanged
        return
    assert int(got.view(np.uint32)) & 0x1FFF == 0                      # a TF32 value
    assert got.view(np.uint32) == tf32_nearest_away(x).view(np.uint32)


def test_tf32_round_ties_and_edges():
    one = np.float32(1.0)
    step = np.float32(2.0 ** -10)                                      # TF32 ulp at 1
    tie = np.float32(1.0 + 2.0 ** -11)                                 # halfway: away from zero
    assert ref_mma.tf32_round(tie) == one + step
    assert ref_mma.tf32_round(-tie) == -(one + step)
    assert ref_mma.tf32_round(np.nextafter(tie, np.float32(0))) == one
    assert ref_mma.tf32_round(np.float32(np.finfo(np.float32).max)) == np.inf
    assert ref_mma.tf32_round(np.float32(0.0)) == 0.0


def test_tf32_probe_matches_model():
    x = np.random.default_rng(0).standard_normal(100).astype(np.float32)
    out = np.zeros_like(x)
    mma_probes.tf32_probe[1, 128](x, out)
    np.testing.assert_array_equal(out.view(np.uint32), ref_mma.tf32_round(x).view(np.uint32))


def bf16_nearest_even(x: np.float32) -> int:
    """Independent model of cvt.rn.bf16.f32 for a finite float32: of the two bf16 values around ``x`` (its
    high 16 bits, and one bf16 step further from zero), the nearer in exact arithmetic; a tie goes to the
    even one (bit 0 clear); past the largest bf16 by half a step or more: infinity."""
    bits = int(np.float32(x).view(np.uint32))
    down, up = bits >> 16, (bits >> 16) + 1
    lo, hi = (np.uint32(v << 16).view(np.float32) for v in (down, up))
    ex = Fraction(float(x))
    if not np.isfinite(hi):
        return up if abs(ex - Fraction(float(lo))) >= Fraction(2) ** 119 else down
    dl, dh = abs(ex - Fraction(float(lo))), abs(Fraction(float(hi)) - ex)
    return up if dh < dl or (dh == dl and down & 1) else down


@given(bits=st.integers(0, 2**32 - 1))
def test_bf16_bits_is_nearest_even(bits):
    x = np.uint32(bits).view(np.float32)
    got = int(ref_mma.bf16_bits(x))
    if np.isnan(x):
        assert got == 0x7FFF
    elif np.isinf(x):
        assert got == bits >> 16
    else:
        assert got == bf16_nearest_even(x)


def test_bf16_pairs_and_probe_pack_low_half_first():
    lo = np.array([1.0, 1.0 + 2.0 ** -8, -3.0, 2.0 ** -130], np.float32)    # a tie (to even), a subnormal
    hi = np.array([2.0, 1.0 + 3 * 2.0 ** -8, np.inf, 0.0], np.float32)      # a tie up to even
    want = ref_mma.bf16_bits(lo) | (ref_mma.bf16_bits(hi) << np.uint32(16))
    assert [int(v) for v in want[:3]] == [0x40003F80, 0x3F823F80, 0x7F80C040]
    np.testing.assert_array_equal(ref_mma.bf16_pairs(lo, hi).view(np.uint32), want)
    out = np.zeros(4, np.uint32)
    mma_probes.bf16x2_probe[1, 32](lo, hi, out)
    np.testing.assert_array_equal(out, want)


def _within_one_ulp(got, exact):
    """The fallbacks round the float64 sum once to float32; NumPy's float64 sum may be ordered
    differently, which can move a result across a float32 rounding boundary: 1 ulp at most."""
    want = exact.astype(np.float32)
    np.testing.assert_array_max_ulp(got, want, maxulp=1)


@pytest.mark.simulator("the real instruction rounds toward zero: tests/gpu/test_uspmm_tc_gpu.py "
                       "test_mma_f16_matches_numpy")
@given(data=st.data(), nbatch=st.integers(1, 2))
def test_mma_f16_fallback_matches_numpy(data, nbatch):
    a = data.draw(dense_arrays((nbatch, 16, 16), dtype=np.float16))
    b = data.draw(dense_arrays((nbatch, 16, 8), dtype=np.float16))
    c = data.draw(dense_arrays((nbatch, 16, 8), dtype=np.float32))
    bt = np.ascontiguousarray(b.transpose(0, 2, 1))
    d = np.zeros_like(c)
    mma_probes.mma_probe_f16[1, 32 * nbatch](a.ravel(), bt.ravel(), c.ravel(), d.reshape(-1), nbatch)
    _within_one_ulp(d, a.astype(np.float64) @ b.astype(np.float64) + c)


@pytest.mark.simulator("the real instruction rounds toward zero: tests/gpu/test_uspmm_tc_gpu.py "
                       "test_mma_tf32_matches_numpy")
@given(data=st.data(), nbatch=st.integers(1, 2))
def test_mma_tf32_fallback_matches_numpy(data, nbatch):
    a = data.draw(dense_arrays((nbatch, 16, 8), dtype=np.float32))
    b = data.draw(dense_arrays((nbatch, 8, 8), dtype=np.float32))
    c = data.draw(dense_arrays((nbatch, 16, 8), dtype=np.float32))
    d = np.zeros_like(c)
    mma_probes.mma_probe_tf32[1, 32 * nbatch](a.ravel(), b.ravel(), c.ravel(), d.reshape(-1), nbatch)
    exact = ref_mma.tf32_round(a).astype(np.float64) @ ref_mma.tf32_round(b).astype(np.float64) + c
    _within_one_ulp(d, exact)


def test_fragment_coords_cover_each_tile_once():
    for shape, kdim in (("m16n8k16", 16), ("m16n8k8", 8)):
        seen = {"a": [], "b": [], "c": []}
        for lane in range(32):
            for name, cells in ref_mma.fragment_coords(shape, lane).items():
                seen[name[0]] += cells
        assert sorted(seen["a"]) == [(r, k) for r in range(16) for k in range(kdim)]
        assert sorted(seen["b"]) == [(k, col) for k in range(kdim) for col in range(8)]
        assert sorted(seen["c"]) == [(r, col) for r in range(16) for col in range(8)]


def test_ldmatrix_fallback_matches_model():
    tile = np.arange(256, dtype=np.float16).reshape(16, 16)
    out = np.zeros(128, dtype=np.uint32)
    mma_probes.ldmatrix_probe[1, 32](tile.ravel(), out)
    np.testing.assert_array_equal(out.reshape(32, 4), ref_mma.ldmatrix_expected(tile))


def test_ldmatrix_gives_mma_b_fragments():
    """For B (16 x 8) row-major, registers 0 and 1 of lane l are the m16n8k16 fragments b0, b1."""
    b = np.arange(256, dtype=np.float16).reshape(16, 16)
    got = ref_mma.ldmatrix_expected(b)
    for lane in range(32):
        where = ref_mma.fragment_coords("m16n8k16", lane)
        for reg, name in ((0, "b0"), (1, "b1")):
            halves = np.array([got[lane, reg]], dtype=np.uint32).view(np.float16)
            assert list(halves) == [b[r, c] for r, c in where[name]]
