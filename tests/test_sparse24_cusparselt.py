"""Our 2:4 packing in cuSPARSELt's layout: the reference reproduces the H100's buffers; the kernel equals it."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest
from hypothesis import given, strategies as st

from sparsekit.reference import sparse24_cusparselt as ref_cslt
from sparsekit.reference import sparsify24 as ref
from tests.strategies import dense_arrays

H100 = pathlib.Path(__file__).parent / "data" / "cslt_h100_128x128.npz"


def test_reference_reproduces_cusparselt_compress_on_the_h100():
    # w: a 128x128 fp16 weight already pruned to a full transposable pattern; compress: the bytes
    # torch._cslt_compress(w) returned on the lent H100 (torch 2.11, cuSPARSELt 0.8.0)
    d = np.load(H100)
    s = ref.sparsify24(d["w"])
    assert np.array_equal(s.mask, d["w"] != 0)
    got = ref_cslt.to_cusparselt(s.packed, s.meta)
    assert got.shape == d["compress"].shape
    assert np.array_equal(got.view(np.uint16), d["compress"].view(np.uint16))


def test_nibble_sources_are_a_permutation():
    row, group = ref_cslt.nibble_sources(128, 192)
    assert sorted((row * 48 + group).tolist()) == list(range(128 * 48))


@st.composite
def cslt_weights(draw):
    m = 64 * draw(st.integers(1, 2))
    k = 64 * draw(st.integers(1, 3))
    return draw(dense_arrays((m, k), dtype=np.float16))


@given(cslt_weights(), st.sampled_from(["index", "torch"]))
def test_kernel_equals_reference(w, ties):
    from sparsekit.gpu.sparse24_cusparselt import cusparselt_meta
    s = ref.sparsify24(w, ties=ties)
    m, k = w.shape
    for packed, meta, rows, cols in ((s.packed, s.meta, m, k), (s.packed_t, s.meta_t, k, m)):
        want = ref_cslt.to_cusparselt(packed, meta).reshape(-1).view(np.uint8)[rows * cols:]
        assert np.array_equal(cusparselt_meta(meta, rows, cols), want)


@pytest.mark.parametrize("m,k", [(32, 64), (64, 96)])
def test_shapes_not_multiples_of_64_are_refused(m, k):
    from sparsekit.gpu.sparse24_cusparselt import cusparselt_meta
    s = ref.sparsify24(np.ones((m, k), np.float16))
    with pytest.raises(ValueError, match="multiple of 64|multiples of 64|divisible by 64"):
        ref_cslt.to_cusparselt(s.packed, s.meta)
    with pytest.raises(ValueError, match="divisible by 64"):
        cusparselt_meta(s.meta, m, k)
