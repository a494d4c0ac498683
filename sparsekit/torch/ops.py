"""The sparse linear product as a ``torch.library`` custom op, with a fake (meta) kernel and autograd.

``sparsekit::sparse_linear(x, values, indices, in_features, weight_id)`` is ``y = x @ W^T`` for a weight
``W`` (``M x K``) held as padded ELL rows (``sparsekit/reference/spmm_ell_rows.py``): ``values`` and ``indices``
(``M x W``, ``W`` a multiple of 8; column ``K`` marks padding; columns are read as unsigned 16-bit).

* CUDA, float16/bfloat16, ``N <= KERNEL_MAX_N``: :func:`sparsekit.gpu.spmm_ell_rows.spmm_ell_rows_linear`, bound by
  reading the weight's 4 bytes a kept entry; its launches are recorded once per (weight, ``N``) and replayed
  with ``cuLaunchKernel`` on torch's current stream (:mod:`sparsekit.launch`): no host sync, no allocation
  outside torch's allocator, so a CUDA graph can capture it.
* CUDA, wider ``x`` (prefill) or float32: ``W`` densified for the call (:func:`sparsekit.gpu.spmm_ell_rows.densify_ell_rows`,
  recorded the same way, or torch's scatter for float32) and dense GEMM (cuBLAS); nothing dense is kept.
* CPU: torch ops on the densified weight with float32 accumulation (float64 stays float64: ``gradcheck``).

Autograd: ``dX = dY @ W`` (the densified weight) and the gradient of the kept entries only,
``dvalues[m, j] = (dY^T x)[m, indices[m, j]]`` (zero at padding), so training keeps the pattern.
"""
from __future__ import annotations

import itertools
import weakref

import torch

__all__ = ["sparse_linear", "forward", "dense_weight", "register", "KERNEL_MAX_N", "KERNEL_DTYPES"]

#: The widest ``x`` the row kernel multiplies; wider goes to dense GEMM on the densified weight. At
#: ``N <= 16`` the kernel beats densify + GEMM (which moves the dense weight twice) at every sparsity from
#: 50 %; at ``N = 32`` it takes 2.5-10x dense cuBLAS (``experiments/results/uspmm_decode.md``).
KERNEL_MAX_N = 16
#: dtypes the CUDA kernels take.
KERNEL_DTYPES = (torch.float16, torch.bfloat16)

_WEIGHTS: dict = {}
_IDS = itertools.count(1)
_UNRECORDED = object()


def _columns(indices: torch.Tensor) -> torch.Tensor:
    """The columns of ``indices`` as int64 (stored as int16: read unsigned)."""
    return indices.long() & 0xFFFF


def dense_weight(values: torch.Tensor, indices: torch.Tensor, in_features: int) -> torch.Tensor:
    """``W`` (``M x K``) from padded ELL rows with torch ops, zeros where nothing is stored."""
    out = values.new_zeros((values.shape[0], in_features + 1))        # column K: padding lands there
    return out.scatter(1, _columns(indices), values)[:, :in_features]


class Prepared:
    """One layer's launch plans (per ``N``, dtype, device and the addresses of its tensors) and the scratch
    buffers they point at; dropped with its layer."""

    def __init__(self):
        from sparsekit.gpu.launch import Buffers

        self.plans: dict = {}
        self.buffers = Buffers()

    def _run(self, key, product, x, out_shape) -> torch.Tensor:
        """``product()(x)``, an output of ``out_shape``: recorded on the first call with ``key``, replayed after
        (when it could be). ``product`` builds the callable only when it is needed."""
        plan = self.plans.get(key, _UNRECORDED)
        if plan is None:
            return product()(x)
        if plan is _UNRECORDED:
            from sparsekit.launch import record

            out, self.plans[key] = record(product(), x, lambda t: t.new_empty(out_shape))
            return out
        out = x.new_empty(out_shape)
        plan(x.data_ptr(), out.data_ptr(), torch._C._cuda_getCurrentRawStream(x.get_device()))
        return out

    def product(self, x, values, indices, in_features: int) -> torch.Tensor:
        """``x @ W^T`` on CUDA (``x`` ``N x K`` C-contiguous, no grad, ``N <= KERNEL_MAX_N``, a kernel dtype)."""
        key = (x.shape[0], x.dtype, x.get_device(), values.data_ptr(), indices.data_ptr())

        def product():
            from sparsekit.gpu.spmm_ell_rows import spmm_ell_rows_linear

            return lambda t: spmm_ell_rows_linear(values.detach(), indices, in_features, t.detach(),
                                                  buffers=self.buffers)

        return self._run(key, product, x, (x.shape[0], values.shape[0]))

    def dense(self, values, indices, in_features: int) -> torch.Tensor:
        """``W`` densified on CUDA for one call (float16/bfloat16: the densify kernel, recorded with the
        values as its input)."""
        v = values.detach()
        if v.dtype not in KERNEL_DTYPES:
            return dense_weight(v, indices, in_features)
        key = ("dense", v.dtype, v.get_device(), v.data_ptr(), indices.data_ptr())

        def product():
            from sparsekit.gpu.spmm_ell_rows import densify_ell_rows

            return lambda t: densify_ell_rows(t, indices, in_features)

        return self._run(key, product, v, (v.shape[0], in_features))


def register(owner) -> int:
    """A new weight id for :func:`sparse_linear`, its :class:`Prepared` dropped when ``owner`` is."""
    wid = next(_IDS)
    _WEIGHTS[wid] = Prepared()
    weakref.finalize(owner, _WEIGHTS.pop, wid, None)
    return wid


def _on_kernel(x: torch.Tensor) -> bool:
    return x.dtype in KERNEL_DTYPES and x.shape[0] <= KERNEL_MAX_N


def forward(x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, in_features: int,
            weight_id: int) -> torch.Tensor:
    """``x @ W^T`` on ``x``'s device (the op's body; also the eager fast path of the layer)."""
    if x.is_cuda:
        prep = _WEIGHTS[weight_id]
        if _on_kernel(x):
            return prep.product(x if x.is_contiguous() else x.contiguous(), values, indices, in_features)
        return torch.nn.functional.linear(x, prep.dense(values, indices, in_features))
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    return (x.to(acc) @ dense_weight(values, indices, in_features).to(acc).T).to(x.dtype)


@torch.library.custom_op("sparsekit::sparse_linear", mutates_args=())
def sparse_linear(x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, in_features: int,
                  weight_id: int) -> torch.Tensor:
    """``x @ W^T`` for ``x`` (``N x K``) and the weight of padded ELL rows ``values``/``indices``."""
    if x.dtype != values.dtype:
        raise ValueError(f"x: dtype must be the weight's {values.dtype}, got {x.dtype}")
    return forward(x, values, indices, in_features, weight_id)


@sparse_linear.register_fake
def _(x, values, indices, in_features, weight_id):
    return x.new_empty((x.shape[0], values.shape[0]))


def _setup(ctx, inputs, output):
    x, values, indices, in_features, weight_id = inputs
    ctx.in_features, ctx.weight_id = in_features, weight_id
    ctx.save_for_backward(x, values, indices)


def _backward(ctx, grad):
    x, values, indices = ctx.saved_tensors
    grad_x = grad_values = None
    acc = torch.float64 if grad.dtype == torch.float64 else torch.float32
    if ctx.needs_input_grad[0]:
        w = (_WEIGHTS[ctx.weight_id].dense(values, indices, ctx.in_features) if grad.is_cuda
             else dense_weight(values, indices, ctx.in_features))
        grad_x = (grad.to(acc) @ w.to(acc)).to(x.dtype)
    if ctx.needs_input_grad[1]:
        outer = grad.to(acc).T @ x.to(acc)                                 # (M x K) dY^T x
        outer = torch.nn.functional.pad(outer, (0, 1))                     # column K (padding): zero
        grad_values = outer.gather(1, _columns(indices)).to(values.dtype)
    return grad_x, grad_values, None, None, None


sparse_linear.register_autograd(_backward, setup_context=_setup)
