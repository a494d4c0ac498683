"""2:4 sparse training step on a GPU: cuSPARSELt GEMMs on our transposable masks.

Skipped without PyTorch, CUDA or cuSPARSELt (the reason is the skip message).
"""
from __future__ import annotations

import numpy as np
import pytest

from sparsekit.reference import sparsify24 as ref

pytestmark = pytest.mark.gpu

# fp16 outputs of fp32-accumulated products of length <= 512: within a few fp16 ulps (2^-10)
# of the largest output, relative to the float64 product of the same fp16 inputs
GEMM_RTOL = 2e-3


def _torch():
    from sparsekit import sparse24_training as st
    ok, why = st.available()
    if not ok:
        pytest.skip(why)
    import torch
    return torch, st


def _inputs(torch, n=512, fin=256, fout=384, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(torch.randn(*s, device="cuda", dtype=torch.float16, generator=g)
                 for s in ((n, fin), (fout, fin), (n, fout)))


def test_pruned_dense_is_our_mask():
    torch, st = _torch()
    _, w, _ = _inputs(torch)
    wp, _ = st.pruned_dense(w)
    want = ref.sparsify24(w.cpu().numpy(), ties="torch")
    assert np.array_equal(wp.cpu().numpy(), np.where(want.mask, w.cpu().numpy(), np.float16(0)))


def test_step_matches_dense_products_of_the_pruned_weight():
    torch, st = _torch()
    x, w, dy = _inputs(torch)
    wp, _ = st.pruned_dense(w)
    y, dx, dw = st.linear_step(x, w, dy)
    for got, want in ((y, x.double() @ wp.double().t()), (dx, dy.double() @ wp.double())):
        assert got.shape == want.shape
        assert ((got.double() - want).abs().max() / want.abs().max()).item() < GEMM_RTOL
    assert torch.equal(dw, dy.t() @ x)       # dense: the straight-through gradient reaches every weight


def test_autograd_function_equals_the_step():
    torch, st = _torch()
    x, w, dy = _inputs(torch, seed=1)
    xa, wa = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    y = st.Sparse24Linear.apply(xa, wa, "greedy", "torch")
    y.backward(dy)
    y2, dx2, dw2 = st.linear_step(x, w, dy)
    assert torch.equal(y, y2) and torch.equal(xa.grad, dx2) and torch.equal(wa.grad, dw2)


def test_our_buffers_equal_cusparselt_compress_when_every_group_keeps_two():
    # optimal_full keeps exactly 2 in every row group of W and of W^T, so no filler slot exists and
    # the bytes must be _cslt_compress's (a group keeping 1 may put its filler elsewhere there)
    torch, st = _torch()
    _, w, _ = _inputs(torch, seed=2)
    ours = st.cusparselt_pair(w, method="optimal_full", pack="ours")
    theirs = st.cusparselt_pair(w, method="optimal_full", pack="compress")
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and torch.equal(a.view(torch.int16), b.view(torch.int16))


@pytest.mark.parametrize("ties", ["torch", "index"])
def test_our_greedy_buffers_multiply_like_cusparselt_compress(ties):
    torch, st = _torch()
    x, w, dy = _inputs(torch, seed=3)
    ours = st.linear_step(x, w, dy, ties=ties, pack="ours")
    theirs = st.linear_step(x, w, dy, ties=ties, pack="compress")
    for a, b in zip(ours, theirs):
        assert ((a.double() - b.double()).abs().max() / b.double().abs().max()).item() < GEMM_RTOL
