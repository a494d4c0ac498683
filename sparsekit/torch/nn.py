"""``SparseLinear`` and ``sparsify_``: sparse ``nn.Linear`` replacements for PyTorch models."""
from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn

from sparsekit.reference.spmm_ell_rows import MAX_COLUMNS, ROW_MULTIPLE   # rows padded to 8 entries; 16-bit columns
from sparsekit import prune
from sparsekit.torch.ops import (_WEIGHTS, COPIES, KERNEL_DTYPES, copies_bytes, dense_weight, forward, register,
                                 sparse_linear, sparse_linear_inference)

__all__ = ["SparseLinear", "sparsify_", "replace_linears", "PATTERNS"]

#: Sparsity patterns :meth:`SparseLinear.from_dense` prunes to: every row keeps its largest ``|w|``, the
#: same count a row ("uniform"); 2 of every 4 ("2:4"); the layer's largest ``|w|``, any count a row
#: ("unstructured", rows padded to the longest).
PATTERNS = ("uniform", "2:4", "unstructured")
#: float64 runs on the CPU only (gradcheck); CUDA kernels take float16 and bfloat16.
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _kept_columns(w: torch.Tensor, pattern: str, sparsity: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(columns, counts)``: the ascending columns each row of ``w`` keeps, padded on the right with
    ``in_features`` (``out x width``, int64, on ``w``'s device), and each row's count. Uniform:
    :func:`sparsekit.prune.uniform`'s rule (the ``K'`` largest ``|w|``, ties to the lower column) and 2:4:
    :func:`sparsekit.prune.n_m`'s (the 2 largest ``|w|`` of every 4 columns, ties likewise), both with torch on the
    weight's device (NumPy's ``n_m`` took 6 s for a 14336x4096 weight on a 2-core host); unstructured: the layer's
    largest ``|w|``."""
    m, k = w.shape
    cols = torch.arange(k, device=w.device).expand(m, k)
    scores = w.abs() if w.dtype == torch.float64 else w.abs().float()       # exact for every accepted dtype
    if pattern == "2:4":
        if k % 4:
            raise ValueError(f"w.shape[1] (the grouped axis): must be divisible by 4, got {k}")
        best = torch.sort(scores.reshape(m, k // 4, 4), dim=2, descending=True, stable=True).indices[:, :, :2]
        chosen = best.sort(dim=2).values + 4 * torch.arange(k // 4, device=w.device)[:, None]
        return chosen.reshape(m, k // 2), torch.full((m,), k // 2, device=w.device)
    if pattern == "uniform":
        kept = int(prune.uniform(np.ones((1, k)), sparsity).sum())          # K' for this width
        order = torch.sort(scores, dim=1, descending=True, stable=True).indices
        chosen = order[:, :kept].sort(dim=1).values
        return chosen, torch.full((m,), kept, device=w.device)
    keep = max(1, round(m * k * (1 - sparsity)))
    mask = scores >= scores.flatten().kthvalue(m * k - keep + 1).values
    counts = mask.sum(dim=1)
    keyed = torch.where(mask, cols, k)                                       # dropped columns sort last as K
    return keyed.sort(dim=1).values[:, :int(counts.max()) if m else 0], counts


class SparseLinear(nn.Module):
    """``y = x W^T + b`` with ``W`` (``out x in``) stored as its kept entries only, as padded ELL rows
    (``sparsekit/reference/spmm_ell_rows.py``): ``values`` (the trainable Parameter, ``out x width``) and ``indices``
    (a buffer, int16 bits of each entry's column; ``in_features`` marks padding), ``width`` the longest row
    rounded up to a multiple of 8. 4 bytes a kept weight in float16/bfloat16; nothing else is stored but the
    copies inference below reads, once built (:attr:`inference_copies`).

    Any pattern (uniform, 2:4, unstructured, or your own: :meth:`from_rows`). Gradients reach the kept
    entries only, so fine-tuning keeps the pattern. On CUDA, float16 and bfloat16 (for ``N`` rows of ``x``;
    why: :mod:`sparsekit.torch.ops`, measured on the H200 at Llama shapes):

    * without autograd, ``N = 1`` below 87.5 % sparse: the compact row kernel on a copy of the weight as compact
      ELL rows (3.25 bytes a kept weight; 1.10-1.17x the row kernel at 50-80 %), made with torch ops on the
      device at the first such call and kept beside the rows (0.33 of the dense bytes at 80 %), made again after a
      change as the TiledBitmap below;
    * ``N < 8`` otherwise, ``N = 8`` when a row stores at most a quarter of ``in_features`` (75 % sparse and more) and
      ``N = 9..16`` at most a sixteenth (93.75 %): the row kernel on the ELL rows, bound by reading 4 bytes a kept
      weight;
    * without autograd (``torch.no_grad``, ``torch.inference_mode``), ``N = 8`` otherwise and ``N = 9..32`` (to 64
      on weights of 2**25 entries and more, :data:`sparsekit.torch.ops.BITMAP_WIDE_MIN_WEIGHTS`): the
      tensor-core kernel on the weight as a :class:`~sparsekit.formats.TiledBitmap`, built from the rows on the
      device at the first such call (a few host syncs, one copy through the host), kept on the device
      beside them (0.42 of the dense bytes at 80 %) and built again after the values or indices change as torch
      counts it (an optimizer step, ``copy_``, in-place ops; a write through ``.data`` is not counted);
    * with autograd, ``N <= 16``: the row kernel;
    * a 2:4 weight without autograd, ``N > 32``: cuSPARSELt's 2:4 GEMM on the weight compressed at the first such
      call (9/16 of the dense bytes, kept beside the rows and built again after a change, as the TiledBitmap);
    * wider ``x``: dense GEMM on the weight densified for the call.

    float32 runs the last on CUDA; float64 the CPU (gradcheck). Each route's launches are recorded at its first
    call and replayed after; a CUDA graph can capture the layer once it has run at that width outside the
    capture (else RuntimeError). A captured compact, bitmap or cuSPARSELt route reads the copy of the weight its
    capture saw: after changing the weight, run the layer again outside a capture and capture anew. On CUDA without
    autograd and outside ``torch.compile``, ``forward`` skips the custom op's dispatch (a few microseconds of host
    time); without autograd elsewhere (traced, or on the CPU) it calls the op that has no autograd kernel,
    ``torch.ops.sparsekit.sparse_linear_inference``.

    ``inference_copies`` (default True, every copy): False keeps the weight in its ELL rows only (no second copy on
    the device: compact rows, TiledBitmap or cuSPARSELt's), at the routes taken with autograd: the row kernel to
    ``N = 16``, densify + GEMM beyond; or the copies to keep by name, of :data:`sparsekit.torch.ops.COPIES`
    (``("compact",)``: batch-1 decode at its fastest for 13/16 of the rows' bytes more, other widths as with
    False). Changing it drops nothing already built.
    """

    @property
    def inference_copies(self) -> frozenset:
        """The copies of the weight inference may keep beside its rows and run on (class docstring)."""
        return self._inference_copies

    @inference_copies.setter
    def inference_copies(self, copies) -> None:
        if isinstance(copies, (bool, np.bool_)):
            chosen = frozenset(COPIES if copies else ())
        else:
            names = tuple(copies) if isinstance(copies, (list, tuple, set, frozenset)) else None
            if names is None or not all(isinstance(c, str) for c in names):
                raise ValueError(f"inference_copies: True, False or a collection of names of {COPIES}, got {copies!r}")
            if unknown := set(names) - set(COPIES):
                raise ValueError(f"inference_copies: unknown copies {sorted(unknown)}; known: {COPIES}")
            chosen = frozenset(names)
        self._inference_copies = _WEIGHTS[self.weight_id].copies = chosen

    @property
    def use_bitmap(self) -> bool:
        """Deprecated: :attr:`inference_copies` (whether any copy is kept)."""
        warnings.warn("SparseLinear.use_bitmap is now inference_copies", DeprecationWarning, stacklevel=2)
        return bool(self.inference_copies)

    @use_bitmap.setter
    def use_bitmap(self, keep: bool) -> None:
        warnings.warn("SparseLinear.use_bitmap is now inference_copies", DeprecationWarning, stacklevel=2)
        self.inference_copies = bool(keep)

    def __init__(self, in_features: int, out_features: int, width: int, *, bias: bool = True,
                 dtype: torch.dtype = torch.float32, device=None):
        super().__init__()
        if dtype not in _DTYPES:
            raise ValueError(f"dtype: must be one of {_DTYPES}, got {dtype}")
        if not 0 < in_features <= MAX_COLUMNS:
            raise ValueError(f"in_features: must be in 1..{MAX_COLUMNS} (columns are stored in 16 bits), got {in_features}")
        if not 0 < width or width % ROW_MULTIPLE:
            raise ValueError(f"width: entries a row must be a positive multiple of {ROW_MULTIPLE}, got {width}")
        self.in_features, self.out_features = in_features, out_features
        self.values = nn.Parameter(torch.zeros((out_features, width), dtype=dtype, device=device))
        pad = torch.tensor(in_features, dtype=torch.int32).to(torch.int16)     # (wraps above 32767: read unsigned)
        self.register_buffer("indices", pad.expand(out_features, width).to(device).contiguous())
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device)) if bias else None
        self.weight_id = register(self)
        self.inference_copies = True

    @classmethod
    def from_dense(cls, linear: nn.Linear, *, pattern: str = "uniform", sparsity: float = 0.5) -> "SparseLinear":
        """``linear`` pruned to ``pattern`` at ``sparsity`` (ignored for 2:4), on its device, with its bias
        and dtype."""
        if pattern not in PATTERNS:
            raise ValueError(f"pattern: must be one of {PATTERNS}, got {pattern!r}")
        if not isinstance(sparsity, (float, int)) or not 0 <= sparsity < 1:
            raise ValueError(f"sparsity: must be in [0, 1), got {sparsity!r}")
        w = linear.weight.detach()
        cols, counts = _kept_columns(w, pattern, sparsity)
        return cls.from_rows(w.gather(1, cols.clamp(max=w.shape[1] - 1)) * (cols < w.shape[1]), cols,
                             w.shape[1], linear.bias)

    @classmethod
    def from_rows(cls, values: torch.Tensor, columns: torch.Tensor, in_features: int,
                  bias: torch.Tensor | None = None) -> "SparseLinear":
        """A layer whose row ``r`` holds ``values[r, j]`` at column ``columns[r, j]`` (``out x n``, any order,
        ``in_features`` for an unused entry), on ``values``' device and dtype. float16 and bfloat16 rows are
        stored in the order the ``N = 1`` kernel gathers best
        (:func:`sparsekit.reference.spmm_ell_rows.bank_balanced`, on the GPU by its kernels: the same entries,
        each row reordered)."""
        m, n = values.shape
        if columns.shape != values.shape:
            raise ValueError(f"columns: must have values' shape {tuple(values.shape)}, got {tuple(columns.shape)}")
        bad = (columns < 0) | (columns > in_features)
        if bool(bad.any()):
            raise ValueError(f"columns: must be in 0..{in_features - 1} ({in_features}: unused)")
        width = ROW_MULTIPLE * max(1, -(-n // ROW_MULTIPLE))
        layer = cls(in_features, m, width, bias=bias is not None, dtype=values.dtype, device=values.device)
        with torch.no_grad():
            layer.values[:, :n] = torch.where(columns < in_features, values, 0)
            layer.indices[:, :n] = columns.to(torch.int32).to(torch.int16)
            if values.dtype in KERNEL_DTYPES and values.is_cuda:  # the order the N = 1 kernel gathers best
                from sparsekit.gpu.spmm_ell_rows import bank_balanced
                from sparsekit.launch import on_torch_stream
                with on_torch_stream():
                    balanced = bank_balanced(layer.values.detach(), layer.indices, in_features)
                for mine, rows in zip((layer.values, layer.indices), balanced):
                    mine.copy_(rows)
            elif values.dtype in KERNEL_DTYPES:                 # (NumPy has no bfloat16: the values' bits)
                from sparsekit.reference.spmm_ell_rows import bank_balanced
                bits = layer.values.detach().view(torch.int16)
                for mine, balanced in zip((bits, layer.indices),
                                          bank_balanced(bits.numpy(), layer.indices.numpy(), in_features)):
                    mine.copy_(torch.from_numpy(balanced))
            if bias is not None:
                layer.bias.copy_(bias.detach())
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.dim() == 2                               # (N, K): no reshapes (a few us of host time a call)
        x2 = x if flat else x.reshape(-1, self.in_features)
        if torch.is_grad_enabled():
            y = sparse_linear(x2, self.values, self.indices, self.in_features, self.weight_id, False)
        elif x2.is_cuda and not torch.compiler.is_compiling():
            if x2.dtype != self.values.dtype:
                raise ValueError(f"x: dtype must be the weight's {self.values.dtype}, got {x2.dtype}")
            y = forward(x2, self.values, self.indices, self.in_features, self.weight_id,  # no dispatch
                        bool(self.inference_copies))
        else:                                             # traced or on the CPU: the op without autograd
            y = sparse_linear_inference(x2, self.values, self.indices, self.in_features, self.weight_id,
                                        bool(self.inference_copies))
        if not flat:
            y = y.reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def __setstate__(self, state):
        """A copy (``copy.deepcopy``, unpickling) gets its own launch plans."""
        super().__setstate__(state)
        self.weight_id = register(self)
        self.inference_copies = state.get("_inference_copies", state.get("use_bitmap", True))   # (older pickles)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """A sparse weight of another width (another pattern or sparsity) loads too: its tensors replace
        this layer's."""
        values, indices = state_dict.get(prefix + "values"), state_dict.get(prefix + "indices")
        if values is not None and indices is not None and values.shape != self.values.shape:
            self.values = nn.Parameter(torch.empty_like(values, device=self.values.device))
            self.indices = torch.empty_like(indices, device=self.indices.device)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

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
        """Bytes of the stored weight: values and indices, and the copies kept for inference once built (its
        compact rows, TiledBitmap; cuSPARSELt's buffer of a 2:4 weight)."""
        return sum(t.numel() * t.element_size() for t in (self.values, self.indices)) + copies_bytes(self.weight_id)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"width={self.values.shape[1]}, bias={self.bias is not None}")


def sparsify_(model: nn.Module, *, pattern: str = "uniform", sparsity: float = 0.5, filter_fn=None,
              inference_copies=True) -> nn.Module:
    """Replace, in place, every ``nn.Linear`` of ``model`` for which ``filter_fn(module, name)`` is true
    (all of them by default) with a :class:`SparseLinear` pruned to ``pattern`` at ``sparsity``
    (``inference_copies``: :attr:`SparseLinear.inference_copies`)."""
    def make(mod):
        layer = SparseLinear.from_dense(mod, pattern=pattern, sparsity=sparsity)
        layer.inference_copies = inference_copies
        return layer
    return replace_linears(model, make, filter_fn, "SparseLinear.from_dense")


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
