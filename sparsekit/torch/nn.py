"""``SparseLinear`` and ``sparsify_``: uniform-sparse ``nn.Linear`` replacements for PyTorch models."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from sparsekit import prune
from sparsekit.torch.ops import dense_weight, prepared, register, uspmm_linear

__all__ = ["SparseLinear", "sparsify_", "PATTERNS"]

#: Sparsity patterns a weight may be pruned to; both are stored as ELL rows (2:4 keeps K/2 a row).
PATTERNS = ("uniform", "2:4")
#: float64 runs on the CPU path only (gradcheck); the GPU kernels take the other three.
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _index_dtype(in_features: int) -> torch.dtype:
    return torch.int16 if in_features <= np.iinfo(np.int16).max else torch.int32


def _kept_columns(w: torch.Tensor, pattern: str, sparsity: float) -> torch.Tensor:
    """The ascending columns each row of ``w`` keeps (``out x K'``, int64, on ``w``'s device): the rule of
    :func:`sparsekit.prune.uniform` (the K' largest ``|w|``, ties: lower column) computed with torch on
    the weight's device, or :func:`sparsekit.prune.n_m` (2 of every 4)."""
    if pattern == "2:4":
        mask = torch.from_numpy(prune.n_m(w.float().cpu().numpy(), 2, 4)).to(w.device)
        cols = torch.arange(w.shape[1], device=w.device).expand_as(w)
        return cols[mask].view(w.shape[0], -1)
    kept = int(prune.uniform(np.ones((1, w.shape[1])), sparsity).sum())   # K' for this width
    order = torch.sort(w.abs().float(), dim=1, descending=True, stable=True).indices
    return order[:, :kept].sort(dim=1).values


class SparseLinear(nn.Module):
    """``y = x W^T + b`` with ``W`` (``out x in``) stored as its kept entries only: ``values`` (a
    Parameter, ``out x K'``) and ``indices`` (a buffer of ascending columns, int16 when ``in <= 32767``).

    Gradients reach the kept values only, so fine-tuning keeps the pattern. float16, bfloat16, float32.
    On CUDA without autograd and outside torch.compile, ``forward`` skips the custom op's dispatch (a few
    microseconds of host time) and calls the prepared weight directly.
    """

    def __init__(self, in_features: int, out_features: int, kept: int, *, bias: bool = True,
                 dtype: torch.dtype = torch.float32, device=None):
        super().__init__()
        if dtype not in _DTYPES:
            raise ValueError(f"dtype: must be one of {_DTYPES}, got {dtype}")
        if not 0 < kept <= in_features:
            raise ValueError(f"kept: entries a row must be in 1..{in_features}, got {kept}")
        self.in_features, self.out_features = in_features, out_features
        self.values = nn.Parameter(torch.zeros((out_features, kept), dtype=dtype, device=device))
        cols = torch.arange(kept, dtype=_index_dtype(in_features), device=device)
        self.register_buffer("indices", cols.expand(out_features, kept).contiguous())
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device)) if bias else None
        self.weight_id = register(in_features)

    @classmethod
    def from_dense(cls, linear: nn.Linear, *, pattern: str = "uniform", sparsity: float = 0.5) -> "SparseLinear":
        """Prune ``linear.weight`` (``pattern``: every row keeps its largest ``|w|``, the same count a
        row, or 2 of every 4) and keep its bias, dtype and device."""
        if pattern not in PATTERNS:
            raise ValueError(f"pattern: must be one of {PATTERNS}, got {pattern!r}")
        w = linear.weight.detach()
        indices = _kept_columns(w, pattern, sparsity)
        layer = cls(w.shape[1], w.shape[0], indices.shape[1], bias=linear.bias is not None, dtype=w.dtype, device=w.device)
        with torch.no_grad():
            layer.indices.copy_(indices.to(layer.indices.dtype))
            layer.values.copy_(w.gather(1, indices))
            if linear.bias is not None:
                layer.bias.copy_(linear.bias.detach())
        return layer

    def __setstate__(self, state):
        """A copy (``copy.deepcopy``, unpickling) gets its own prepared weight."""
        super().__setstate__(state)
        self.weight_id = register(self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if x2.is_cuda and not torch.is_grad_enabled() and not torch.compiler.is_compiling():
            y = prepared(self.weight_id).forward(x2.contiguous(), self.values, self.indices)  # no op dispatch
        else:
            y = uspmm_linear(x2, self.values, self.indices, self.weight_id)
        y = y.reshape(*lead, self.out_features)
        return y if self.bias is None else y + self.bias

    def to_dense(self) -> nn.Linear:
        """The equivalent ``nn.Linear`` (pruned entries zero)."""
        dense = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None,
                          dtype=self.values.dtype, device=self.values.device)
        with torch.no_grad():
            dense.weight.copy_(dense_weight(self.values, self.indices, self.in_features))
            if self.bias is not None:
                dense.bias.copy_(self.bias)
        return dense

    def weight_bytes(self) -> int:
        """Bytes of the stored weight (values and indices)."""
        return sum(t.numel() * t.element_size() for t in (self.values, self.indices))

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"kept={self.values.shape[1]}, bias={self.bias is not None}")


def sparsify_(model: nn.Module, *, pattern: str = "uniform", sparsity: float = 0.5, filter_fn=None) -> nn.Module:
    """Replace, in place, every ``nn.Linear`` of ``model`` for which ``filter_fn(module, name)`` is true
    (all of them by default) with a :class:`SparseLinear` pruned to ``pattern`` at ``sparsity``."""
    return replace_linears(model, lambda mod: SparseLinear.from_dense(mod, pattern=pattern, sparsity=sparsity),
                           filter_fn, "SparseLinear.from_dense")


def replace_linears(model: nn.Module, make, filter_fn, single: str) -> nn.Module:
    """Every ``nn.Linear`` of ``model`` that ``filter_fn(module, name)`` accepts (all by default) replaced, in
    place, by ``make(module)``; a bare ``nn.Linear`` is refused (``single`` names what converts one)."""
    if type(model) is nn.Linear:
        raise ValueError(f"model: a bare nn.Linear cannot be replaced in place; use {single}")
    targets = [(name, mod) for name, mod in model.named_modules()
               if type(mod) is nn.Linear and (filter_fn is None or filter_fn(mod, name))]
    for name, mod in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, make(mod))
    return model
