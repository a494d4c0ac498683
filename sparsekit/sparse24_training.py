"""2:4 sparse training step in PyTorch with our sparsifier (needs torch with CUDA).

The semi-structured training post (../shared/papers/semi-structured-24-training.txt)
re-sparsifies a linear layer's weight ``W`` (out x in) to a transposable 2:4
pattern at every step and runs

* forward   ``y  = x W^T``     on 2:4 sparse tensor cores (sparse ``W``),
* backward  ``dx = dy W``      on 2:4 sparse tensor cores (sparse ``W^T``: this is
  why the tile mask must be 2:4 along rows AND columns),
* backward  ``dW = dy^T x``    dense, and the dense gradient updates every weight
  (straight-through estimator).

:class:`Sparse24Linear` is that step as a ``torch.autograd.Function``; the
sparsifier is :func:`sparsekit.gpu.sparsify24.sparsify24` (torch tensors in, torch tensors
out, no copies), the sparse GEMMs are PyTorch's cuSPARSELt ones
(``torch._cslt_sparse_mm``), because PyTorch's CUTLASS 2:4 GEMM refuses sm_90
("Supported only on GPUs with compute capability 8.x", measured on the H100).

cuSPARSELt keeps values and metadata in one buffer (``torch._cslt_compress`` of
the pruned dense matrix). Its layout, read off the H100
(:mod:`sparsekit.reference.sparse24_cusparselt`), holds our packed values unchanged and
our metadata nibbles in another order, so ``pack="ours"`` (default) builds
both buffers from our kernel's outputs: one small kernel reorders the
metadata (:func:`sparsekit.gpu.sparse24_cusparselt.cusparselt_meta`) and a concatenation
puts it after the values, no compression pass. ``pack="compress"`` is the
cross-check: expand our tile masks to the pruned ``W`` and compress ``W`` and
``W^T`` with cuSPARSELt (the same matrices; the same bytes where every row group
keeps 2, e.g. ``method="optimal_full"``; slower).
"""
from __future__ import annotations

import functools

__all__ = ["pruned_dense", "cusparselt_pair", "Sparse24Linear", "linear_step", "available"]


def _torch():
    import torch
    return torch


def available() -> tuple[bool, str]:
    """(usable, reason): PyTorch with CUDA and cuSPARSELt present."""
    try:
        torch = _torch()
    except ImportError:
        return False, "PyTorch is not installed"
    if not torch.cuda.is_available():
        return False, "PyTorch sees no CUDA device"
    if not torch.backends.cusparselt.is_available():
        return False, "PyTorch was built without cuSPARSELt"
    return True, f"torch {torch.__version__}, cuSPARSELt {torch.backends.cusparselt.version()}"


def pruned_dense(w, method: str = "greedy", ties: str = "torch"):
    """(W * mask, Sparse24): our kernel's transposable 2:4 mask applied to ``w`` (torch fp16, on the GPU).

    The dense mask is expanded from the (M/4, K/4) tile bitmasks with torch ops.
    """
    torch = _torch()
    from sparsekit.gpu.sparsify24 import sparsify24
    s = sparsify24(w, method=method, ties=ties, check_finite=False)
    m, k = w.shape
    tm = s.tile_masks.view(torch.int16).to(torch.int32) & 0xFFFF                 # (M/4, K/4)
    bits = (tm[:, :, None] >> torch.arange(16, device=w.device, dtype=torch.int32)) & 1
    mask = bits.view(m // 4, k // 4, 4, 4).permute(0, 2, 1, 3).reshape(m, k)
    return w * mask.to(w.dtype), s


def cusparselt_pair(w, method: str = "greedy", ties: str = "torch", pack: str = "ours"):
    """cuSPARSELt buffers of the pruned ``W`` and of ``W^T`` (forward and dx GEMMs); M, K multiples of 64."""
    torch = _torch()
    if pack == "compress":
        wp, _ = pruned_dense(w, method, ties)
        return torch._cslt_compress(wp), torch._cslt_compress(wp.t().contiguous())
    if pack != "ours":
        raise ValueError(f"pack: must be 'ours' or 'compress', got {pack!r}")
    from sparsekit.gpu.sparse24_cusparselt import cusparselt_meta
    from sparsekit.gpu.sparsify24 import sparsify24
    s = sparsify24(w, method=method, ties=ties, check_finite=False)
    m, k = w.shape

    def buffer(packed, meta, rows, cols):
        mb = cusparselt_meta(meta, rows, cols)
        return torch.cat([packed.reshape(-1), mb.view(torch.float16)]).view(rows, cols * 9 // 16)

    return buffer(s.packed, s.meta, m, k), buffer(s.packed_t, s.meta_t, k, m)


def linear_step(x, w, dy, *, method: str = "greedy", ties: str = "torch", pack: str = "ours",
                alg_ids: tuple[int, int] = (0, 0)):
    """One forward + backward of ``y = x W^T`` with 2:4 sparse GEMMs: ``(y, dx, dW)``, no autograd.

    ``alg_ids``: cuSPARSELt algorithm ids of the forward and dx GEMMs (PyTorch's default is 0; on the
    H100 the fastest differ, experiments/results/sparsify24.md).
    """
    torch = _torch()
    wc, wtc = cusparselt_pair(w, method, ties, pack)
    y = torch._cslt_sparse_mm(wc, x.t(), transpose_result=True, alg_id=alg_ids[0])     # (W x^T)^T = x W^T
    dx = torch._cslt_sparse_mm(wtc, dy.t(), transpose_result=True, alg_id=alg_ids[1])  # (W^T dy^T)^T = dy W
    dw = dy.t() @ x                                                     # dense (straight-through)
    return y, dx, dw


@functools.cache
def _function():
    torch = _torch()

    class Sparse24Linear(torch.autograd.Function):
        """``y = x W^T`` with ``W`` re-sparsified to transposable 2:4 by our kernel at every call.

        Forward and dx run on cuSPARSELt 2:4 GEMMs; dW is dense and reaches every
        weight (straight-through estimator, as the post does). ``x``: (N, in),
        ``w``: (out, in), both fp16 CUDA; out and in multiples of 64. ``alg_ids``:
        cuSPARSELt algorithm ids of the forward and dx GEMMs (see :func:`linear_step`).
        """

        @staticmethod
        def forward(ctx, x, w, method="greedy", ties="torch", alg_ids=(0, 0)):
            wc, wtc = cusparselt_pair(w.detach(), method, ties)
            ctx.save_for_backward(x, wtc)
            ctx.alg_dx = alg_ids[1]
            return torch._cslt_sparse_mm(wc, x.t(), transpose_result=True, alg_id=alg_ids[0])

        @staticmethod
        def backward(ctx, dy):
            x, wtc = ctx.saved_tensors
            dy = dy.contiguous()
            dx = torch._cslt_sparse_mm(wtc, dy.t(), transpose_result=True, alg_id=ctx.alg_dx)
            return dx, dy.t() @ x, None, None, None

    return Sparse24Linear


def __getattr__(name):
    if name == "Sparse24Linear":      # built on first use: importing this module needs no torch
        return _function()
    raise AttributeError(name)
