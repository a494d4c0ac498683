"""``TiledSparseLinear``: a PyTorch linear layer whose weight is a :class:`~sparsekit.formats.TiledCSL`.

Any sparsity pattern (uniform or not), float16 or bfloat16. The product is the custom op
``torch.ops.sparsekit.spmm_tiled_linear`` (``y = x @ W^T``):

* a fake kernel, so ``torch.compile(fullgraph=True)`` traces a sparsified model with no graph break;
* on CUDA, ``gpu/spmm_tiled.py`` (the row kernel for ``tile=(1, TK)``, ``N <= 64``) on the weight
  prepared once, its launches recorded once and replayed with ``cuLaunchKernel`` on torch's current stream
  (:mod:`sparsekit.launch`), so a layer can be captured in a CUDA graph; wider ``x`` (prefill) multiplies
  the densified weight;
* on the CPU, torch ops on the densified weight with float32 accumulation (the reference's arithmetic;
  float64 stays float64, for ``gradcheck``);
* autograd: ``dX = dY @ W`` (on CUDA for ``N <= 64`` the same kernel on ``W^T`` as row tiles, built once per
  value update; else the densified weight) and the weight's gradient at the kept positions only,
  ``dvalues[e] = sum over tokens of dY[:, rows[e]] * X[:, cols[e]]``, so fine-tuning keeps the pattern.

The trainable weight is ``values`` (the kept entries, in the TiledCSL's word order); the buffers ``words``,
``offsets`` and ``layout`` (``M, K, TM, TK``) are the TiledCSL itself, refreshed from ``values`` when saved,
so a ``state_dict`` restores the sparse weight exactly.

>>> import torch
>>> model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.SiLU(), torch.nn.Linear(128, 64)).half()
>>> model = sparsify_tiled_(model, sparsity=0.8)
>>> model[0]
TiledSparseLinear(in_features=64, out_features=128, nnz=1664, tile=(1, 64), bias=True)
>>> model(torch.randn(4, 64, dtype=torch.float16)).shape
torch.Size([4, 64])
"""
from __future__ import annotations

import itertools

import numpy as np
import torch
from torch import nn

from sparsekit import prune
from sparsekit.formats import TiledCSL
from sparsekit.torch.nn import replace_linears

__all__ = ["TiledSparseLinear", "sparsify_tiled_", "spmm_tiled_linear", "PATTERNS"]

#: Patterns :meth:`TiledSparseLinear.from_linear` prunes to (any other pattern: :meth:`~TiledSparseLinear.from_tiled`).
PATTERNS = ("uniform",)
_DTYPES = (torch.float16, torch.bfloat16)
_LOW_HALF = 0xFFFF
_HIGH_HALF = -0x10000            # 0xFFFF0000 as an int32

_PREPARED: dict = {}
_IDS = itertools.count(1)


def _value_bits(values: torch.Tensor) -> torch.Tensor:
    """The 16-bit patterns of ``values`` as int32 in 0..65535."""
    return values.detach().view(torch.int16).to(torch.int32) & _LOW_HALF


def _coordinates(words: torch.Tensor, offsets: torch.Tensor, layout):
    """``(slots, rows, cols)`` of the stored (non-sink) words, in word order (int64, on ``words``' device)."""
    m, k, tm, tk = layout
    local = (words >> 16) & _LOW_HALF
    counts = torch.diff(offsets.to(words.device))
    tile = torch.repeat_interleave(torch.arange(counts.numel(), device=words.device), counts)
    slots = torch.nonzero(local != tm * tk).flatten()
    local, tile = local[slots].long(), tile[slots]
    kt = -(-k // tk)
    return slots, tile // kt * tm + local // tk, tile % kt * tk + local % tk


def _dense(values: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, shape) -> torch.Tensor:
    """``W`` (``M x K``) from its kept entries, zeros elsewhere."""
    m, k = shape
    return values.new_zeros(m * k).index_put((rows * k + cols,), values).view(m, k)


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


class _PreparedWeight:
    """The device form of one layer's weight (:func:`gpu.spmm_tiled.prepare`) and, per (N, dtype, device),
    its recorded launch plan; rebuilt when ``values`` or ``words`` change."""

    def __init__(self):
        self._version = None
        self._device = None
        self._plans: dict = {}
        self._transposed_version = None
        self._transposed = None

    def _tiled(self, values, words, offsets, layout):
        from gpu.spmm_tiled import prepare

        version = (values._version, values.data_ptr(), words._version, words.data_ptr())
        if version != self._version:
            host = words.detach().cpu().clone()
            slots = _coordinates(host, offsets.cpu(), layout)[0]
            host[slots] = (host[slots] & _HIGH_HALF) | _value_bits(values.cpu())
            m, k, tm, tk = layout
            a = TiledCSL(words=host.numpy().view(np.uint32), offsets=offsets.cpu().numpy(), shape=(m, k),
                         tile=(tm, tk), value_dtype=_numpy_dtype(values.dtype))
            self._device, self._plans, self._version = prepare(a), {}, version
        return self._device

    def input_grad(self, grad, values, rows, cols, shape) -> torch.Tensor:
        """``dY @ W`` on CUDA: ``W^T`` as a TiledCSL of row tiles, built once per ``values``, times ``dY``."""
        from gpu.spmm_tiled import prepare, spmm_tiled_linear as kernel

        version = (values._version, values.data_ptr())
        if version != self._transposed_version:
            m, k = shape
            a = TiledCSL.from_coords(cols.cpu().numpy(), rows.cpu().numpy(), _to_numpy(values), (k, m),
                                     tile=TiledCSL.row_tile(m))
            self._transposed, self._transposed_version = prepare(a), version
        return kernel(self._transposed, grad)

    def forward(self, x, values, words, offsets, layout) -> torch.Tensor:
        from gpu.spmm_tiled import spmm_tiled_linear as kernel
        from sparsekit.launch import record

        dev = self._tiled(values, words, offsets, layout)
        n, m = x.shape[0], dev.shape[0]
        key = (n, x.dtype, x.device)
        if key not in self._plans:
            out, self._plans[key] = record(lambda t: kernel(dev, t), x, lambda t: t.new_empty((n, m)))
            return out
        plan = self._plans[key]
        if plan is None:
            return kernel(dev, x)
        y = x.new_empty((n, m))
        plan(x.data_ptr(), y.data_ptr(), torch._C._cuda_getCurrentRawStream(x.get_device()))
        return y


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    from sparsekit.arrays import BFLOAT16

    return np.dtype(BFLOAT16) if dtype == torch.bfloat16 else np.dtype(np.float16)


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    """A float16/bfloat16 tensor on the host as NumPy (bfloat16 as ``ml_dtypes.bfloat16``)."""
    host = t.detach().cpu()
    return host.view(torch.int16).numpy().view(_numpy_dtype(t.dtype))


def _on_kernel(x: torch.Tensor, weight_id: int) -> bool:
    """Whether ``gpu/spmm_tiled.py`` takes this product: a CUDA float16/bfloat16 ``x`` of at most 64 rows."""
    return x.is_cuda and x.dtype in _DTYPES and x.shape[0] <= 64 and weight_id in _PREPARED


@torch.library.custom_op("sparsekit::spmm_tiled_linear", mutates_args=())
def spmm_tiled_linear(x: torch.Tensor, values: torch.Tensor, words: torch.Tensor, offsets: torch.Tensor,
                      rows: torch.Tensor, cols: torch.Tensor, layout: list[int], weight_id: int) -> torch.Tensor:
    """``x @ W^T`` for ``x`` (``N x K``) and the TiledCSL weight ``W`` (``M x K``, ``layout = (M, K, TM, TK)``)
    whose kept entries ``values`` lie at ``(rows, cols)`` and whose pattern is ``words``/``offsets``."""
    if x.dtype != values.dtype:
        raise ValueError(f"x: dtype must be the weight's {values.dtype}, got {x.dtype}")
    shape = (layout[0], layout[1])
    if _on_kernel(x, weight_id):
        return _PREPARED[weight_id].forward(x.contiguous(), values, words, offsets, layout)
    acc = _accumulator(x.dtype)
    return (x.to(acc) @ _dense(values, rows, cols, shape).to(acc).T).to(x.dtype)


@spmm_tiled_linear.register_fake
def _(x, values, words, offsets, rows, cols, layout, weight_id):
    return x.new_empty((x.shape[0], layout[0]))


def _setup(ctx, inputs, output):
    x, values, words, offsets, rows, cols, layout, weight_id = inputs
    ctx.shape, ctx.weight_id = (layout[0], layout[1]), weight_id
    ctx.save_for_backward(x, values, rows, cols)


def _backward(ctx, grad):
    x, values, rows, cols = ctx.saved_tensors
    grad_x = grad_values = None
    acc = _accumulator(grad.dtype)
    if ctx.needs_input_grad[0] and grad.dtype == values.dtype and _on_kernel(grad, ctx.weight_id):
        grad_x = _PREPARED[ctx.weight_id].input_grad(grad.contiguous(), values, rows, cols, ctx.shape)
    elif ctx.needs_input_grad[0]:
        grad_x = (grad.to(acc) @ _dense(values, rows, cols, ctx.shape).to(acc)).to(x.dtype)
    if ctx.needs_input_grad[1]:
        grad_values = (grad[:, rows].to(acc) * x[:, cols].to(acc)).sum(0).to(values.dtype)
    return grad_x, grad_values, None, None, None, None, None, None


spmm_tiled_linear.register_autograd(_backward, setup_context=_setup)


class TiledSparseLinear(nn.Module):
    """``y = x W^T + b`` with ``W`` (``out x in``) a TiledCSL of any sparsity pattern, float16 or bfloat16.

    Gradients reach the kept entries (``values``) only, so fine-tuning keeps the pattern."""

    def __init__(self, a: TiledCSL, bias: torch.Tensor | None = None, *, device=None):
        super().__init__()
        if not isinstance(a, TiledCSL):
            raise TypeError(f"a: expected a TiledCSL, got {type(a).__name__}")
        self.register_buffer("words", torch.from_numpy(a.words.view(np.int32).copy()).to(device))
        self.register_buffer("offsets", torch.from_numpy(a.offsets.astype(np.int64)).to(device))
        self.register_buffer("layout", torch.tensor([*a.shape, *a.tile], dtype=torch.int64, device=device))
        self._layout_ints = [*a.shape, *a.tile]
        slots, rows, cols = _coordinates(self.words, self.offsets, self._layout())
        dtype = torch.bfloat16 if a.dtype.name == "bfloat16" else torch.float16
        self.values = nn.Parameter((self.words[slots] & _LOW_HALF).to(torch.int16).view(dtype).clone())
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("cols", cols, persistent=False)
        self.register_buffer("slots", slots, persistent=False)
        self.bias = None if bias is None else nn.Parameter(bias.detach().to(dtype=dtype, device=device).clone())
        self.weight_id = _register()

    @property
    def in_features(self) -> int:
        return self._layout_ints[1]

    @property
    def out_features(self) -> int:
        return self._layout_ints[0]

    def _layout(self) -> list[int]:
        """``[M, K, TM, TK]`` as Python ints (read from the buffer once, not on every call)."""
        return self._layout_ints

    @classmethod
    def from_tiled(cls, a: TiledCSL, bias: torch.Tensor | None = None, *, device=None) -> "TiledSparseLinear":
        """A layer holding ``a`` (``out x in``) as its weight, any pattern."""
        return cls(a, bias, device=device)

    @classmethod
    def from_linear(cls, linear: nn.Linear, sparsity: float, pattern: str = "uniform") -> "TiledSparseLinear":
        """Prune ``linear.weight`` with :func:`sparsekit.prune.uniform` (every row keeps its largest ``|w|``),
        stored with the row tile of the decode kernel; keeps the bias, dtype and device."""
        if pattern not in PATTERNS:
            raise ValueError(f"pattern: must be one of {PATTERNS}, got {pattern!r}")
        w = linear.weight.detach()
        if w.dtype not in _DTYPES:
            raise ValueError(f"linear: weight dtype must be one of {_DTYPES}, got {w.dtype} (call .half() or "
                             f".bfloat16() first)")
        host = _to_numpy(w)
        rows, cols = np.nonzero(prune.uniform(host.astype(np.float32), sparsity))
        a = TiledCSL.from_coords(rows, cols, host[rows, cols], host.shape, tile=TiledCSL.row_tile(host.shape[1]))
        return cls(a, linear.bias, device=w.device)

    def __setstate__(self, state):
        """A copy (``copy.deepcopy``, unpickling) gets its own prepared weight."""
        super().__setstate__(state)
        self.weight_id = _register()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        y = spmm_tiled_linear(x.reshape(-1, x.shape[-1]), self.values, self.words, self.offsets, self.rows,
                              self.cols, self._layout(), self.weight_id)
        y = y.reshape(*lead, y.shape[-1])
        return y if self.bias is None else y + self.bias

    def to_tiled(self) -> TiledCSL:
        """The weight as a TiledCSL (the current values)."""
        self._refresh_words()
        m, k, tm, tk = self._layout()
        return TiledCSL(words=self.words.cpu().numpy().view(np.uint32).copy(), offsets=self.offsets.cpu().numpy(),
                        shape=(m, k), tile=(tm, tk), value_dtype=_numpy_dtype(self.values.dtype))

    def to_dense(self) -> nn.Linear:
        """The equivalent ``nn.Linear`` (pruned entries zero)."""
        dense = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None,
                          dtype=self.values.dtype, device=self.values.device)
        with torch.no_grad():
            dense.weight.copy_(_dense(self.values, self.rows, self.cols, (self.out_features, self.in_features)))
            if self.bias is not None:
                dense.bias.copy_(self.bias)
        return dense

    def _refresh_words(self) -> None:
        """Write the current ``values`` into the low halves of ``words``."""
        with torch.no_grad():
            self.words[self.slots] = (self.words[self.slots] & _HIGH_HALF) | _value_bits(self.values)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        self._refresh_words()
        super()._save_to_state_dict(destination, prefix, keep_vars)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """The sparse weight of another pattern or size loads too: its tensors replace this layer's."""
        device = self.words.device
        for name in ("words", "offsets", "layout"):
            if prefix + name in state_dict:
                setattr(self, name, state_dict[prefix + name].detach().to(device).clone())
        if prefix + "values" in state_dict:
            self.values = nn.Parameter(state_dict[prefix + "values"].detach().to(device).clone())
        self._layout_ints = [int(v) for v in self.layout]
        self.slots, self.rows, self.cols = _coordinates(self.words, self.offsets, self._layout())
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def weight_bytes(self) -> int:
        """Bytes of the stored weight (the TiledCSL's words and offsets)."""
        return sum(t.numel() * t.element_size() for t in (self.words, self.offsets))

    def extra_repr(self) -> str:
        m, k, tm, tk = self._layout()
        return (f"in_features={k}, out_features={m}, nnz={self.values.numel()}, tile={(tm, tk)}, "
                f"bias={self.bias is not None}")


def _register() -> int:
    """A new weight id for :func:`spmm_tiled_linear` (one per layer)."""
    wid = next(_IDS)
    _PREPARED[wid] = _PreparedWeight()
    return wid


def sparsify_tiled_(model: nn.Module, *, sparsity: float, pattern: str = "uniform", filter_fn=None) -> nn.Module:
    """Replace, in place, every float16/bfloat16 ``nn.Linear`` of ``model`` for which ``filter_fn(module, name)``
    is true (all by default) with a :class:`TiledSparseLinear` pruned to ``pattern`` at ``sparsity``."""
    return replace_linears(model, lambda mod: TiledSparseLinear.from_linear(mod, sparsity, pattern), filter_fn,
                           "TiledSparseLinear.from_linear")