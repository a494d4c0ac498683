"""The sparse products as ``torch.library`` custom ops, with fake (meta) kernels and autograd.

``sparsekit::uspmm_linear(x, values, indices, weight_id)`` is ``y = x @ W^T`` for a uniform-sparse
weight ``W`` (``M x K``) held as ELL rows: ``values`` and ``indices`` (``M x K'``, ascending columns).
On CUDA it runs the library's USpMM (:func:`gpu.uspmm.uspmm` with ``config="auto"``) on the weight
prepared once (:class:`PreparedWeight`, found by ``weight_id``), replaying recorded launches
(:mod:`sparsekit.launch`) on torch's current stream; on the CPU it runs torch ops (the densified
weight), the reference path of the tests and of ``gradcheck``.

Autograd: ``dX = dY @ W`` and ``dW`` only at the kept positions, ``dvalues[m, j] = (dY^T x)[m, idx[m, j]]``
(a sampled product, gathered from ``dY^T x``), so training keeps the sparsity pattern.
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

__all__ = ["uspmm_linear", "PreparedWeight", "prepared", "dense_weight", "register"]

_WEIGHTS: dict = {}
_IDS = itertools.count(1)


def dense_weight(values: torch.Tensor, indices: torch.Tensor, in_features: int) -> torch.Tensor:
    """``W`` (``M x K``) from its ELL rows, zeros elsewhere."""
    out = values.new_zeros((values.shape[0], in_features))
    return out.scatter(1, indices.long(), values)


def _numpy_values(values: torch.Tensor) -> np.ndarray:
    """``values`` on the host as a NumPy array of the same dtype (bfloat16 as ``ml_dtypes.bfloat16``)."""
    from sparsekit.arrays import BFLOAT16

    host = values.detach().cpu()
    if host.dtype == torch.bfloat16:
        return host.view(torch.int16).numpy().view(BFLOAT16)
    return host.numpy()


class PreparedWeight:
    """The device form of one sparse weight: the :class:`gpu.device_ell.DeviceELL` and, per
    (N, dtype, device), the recorded launch plan of the product; rebuilt when the values change."""

    def __init__(self, in_features: int):
        self.in_features = in_features
        self._version = None
        self._dell = None
        self._plans: dict = {}

    def device_ell(self, values: torch.Tensor, indices: torch.Tensor):
        from gpu.device_ell import prepare
        from sparsekit.formats import ELL

        version = (values._version, indices._version, values.data_ptr(), indices.data_ptr())
        if version != self._version:
            ell = ELL(values=np.asfortranarray(_numpy_values(values)),
                      indices=np.asfortranarray(indices.detach().cpu().numpy()),
                      shape=(values.shape[0], self.in_features))
            self._dell, self._plans, self._version = prepare(ell), {}, version
        return self._dell

    def forward(self, x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """``x @ W^T`` on CUDA (``x`` ``N x K``, C-contiguous): ``uspmm(W, x^T)`` with ``x^T`` read
        column-major, so ``C = Y^T`` comes back column-major, i.e. ``Y`` row-major, with no copy."""
        from gpu.uspmm import uspmm
        from sparsekit.launch import record

        dell = self.device_ell(values, indices)
        n, m = x.shape[0], values.shape[0]
        key = (n, x.dtype, x.device)
        if key not in self._plans:
            out, self._plans[key] = record(lambda t: uspmm(dell, t.T, config="auto"), x,
                                           lambda t: t.new_empty((n, m)).T)
            return out.T
        plan = self._plans[key]
        if plan is None:
            return uspmm(dell, x.T, config="auto").T
        y = x.new_empty((n, m))
        plan(x.data_ptr(), y.data_ptr(), torch._C._cuda_getCurrentRawStream(x.get_device()))
        return y


def prepared(weight_id: int) -> PreparedWeight:
    """The prepared weight of ``weight_id`` (for the eager fast path of :class:`SparseLinear`)."""
    return _WEIGHTS[weight_id]


def register(in_features: int) -> int:
    """A new weight id for :func:`uspmm_linear` (one per layer)."""
    wid = next(_IDS)
    _WEIGHTS[wid] = PreparedWeight(in_features)
    return wid


@torch.library.custom_op("sparsekit::uspmm_linear", mutates_args=())
def uspmm_linear(x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, weight_id: int) -> torch.Tensor:
    """``x @ W^T`` for ``x`` (``N x K``) and the uniform-sparse ``W`` in ``values``/``indices``."""
    if x.is_cuda:
        return _WEIGHTS[weight_id].forward(x.contiguous(), values, indices)
    return x @ dense_weight(values, indices, x.shape[1]).T


@uspmm_linear.register_fake
def _(x, values, indices, weight_id):
    return x.new_empty((x.shape[0], values.shape[0]))


def _setup(ctx, inputs, output):
    x, values, indices, weight_id = inputs
    ctx.save_for_backward(x, values, indices)


def _backward(ctx, grad):
    x, values, indices = ctx.saved_tensors
    grad_x = grad_values = None
    if ctx.needs_input_grad[0]:
        grad_x = grad @ dense_weight(values, indices, x.shape[1])
    if ctx.needs_input_grad[1]:
        grad_values = (grad.T @ x).gather(1, indices.long())
    return grad_x, grad_values, None, None


uspmm_linear.register_autograd(_backward, setup_context=_setup)
