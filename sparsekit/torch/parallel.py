"""Tensor parallelism for sparse layers over ``torch.distributed`` (NCCL on GPUs, gloo on the CPU).

The Megatron split, applied to :class:`~sparsekit.torch.SparseLinear`:

* **column-parallel** (:func:`shard_columns`): rank ``r`` of ``w`` keeps output rows
  ``[r M / w, (r + 1) M / w)``: its rows of the padded ELL storage, unchanged, so each shard keeps the layer's
  pattern and its sparsity. The output stays split (the next layer is row-parallel); no communication.
* **row-parallel** (:class:`RowParallel`, :func:`shard_rows`): rank ``r`` keeps the entries whose column lies
  in ``[r K / w, (r + 1) K / w)``, columns shifted to start at 0, each row padded to the shard's longest
  (:attr:`RowParallel.padding` reports what that costs); every rank multiplies its part of ``x``, and an
  all-reduce sums the partial outputs; the bias is added once, after it.

:func:`tensor_parallel_` shards a :class:`~sparsekit.torch.decoder.Decoder` in place: ``q``, ``k``, ``v``,
``gate``, ``up`` column-parallel (attention heads split across ranks), ``o`` and ``down`` row-parallel: two
all-reduces a layer. The sharded model gives every rank the unsharded model's output, up to the order of the
sums (float32 accumulation inside a shard, the dtype's rounding between shards).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from sparsekit.torch.nn import SparseLinear

__all__ = ["shard_columns", "shard_rows", "RowParallel", "tensor_parallel_"]


def _split(size: int, rank: int, world: int, what: str) -> tuple[int, int]:
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank: must be in 0..{world - 1} for a world of {world}, got {rank}")
    if size % world:
        raise ValueError(f"{what}: {size} does not split evenly over {world} ranks")
    part = size // world
    return rank * part, (rank + 1) * part


def _dense_shard(layer: nn.Linear, rows: slice, cols: slice, bias: bool) -> nn.Linear:
    w = layer.weight.detach()[rows, cols]
    out = nn.Linear(w.shape[1], w.shape[0], bias=bias and layer.bias is not None, dtype=w.dtype, device=w.device)
    with torch.no_grad():
        out.weight.copy_(w)
        if out.bias is not None:
            out.bias.copy_(layer.bias.detach()[rows])
    return out


def shard_columns(layer, rank: int, world: int):
    """Rank ``rank``'s output rows of ``layer`` (column-parallel: its share of ``y``, no communication); a
    dense ``nn.Linear`` is sliced the same way (the dense baseline)."""
    lo, hi = _split(layer.out_features, rank, world, "out_features")
    if type(layer) is nn.Linear:
        return _dense_shard(layer, slice(lo, hi), slice(None), bias=True)
    values, columns = layer.values.detach()[lo:hi], layer.indices[lo:hi].long() & 0xFFFF
    bias = None if layer.bias is None else layer.bias.detach()[lo:hi]
    return _with_copies_of(layer, SparseLinear.from_rows(values, columns, layer.in_features, bias))


def shard_rows(layer, rank: int, world: int):
    """Rank ``rank``'s input columns of ``layer`` (row-parallel: a partial ``y`` over its slice of ``x``), each
    row padded to the shard's longest; no bias (the all-reduce's owner adds it once). A dense ``nn.Linear``
    is sliced the same way."""
    lo, hi = _split(layer.in_features, rank, world, "in_features")
    if type(layer) is nn.Linear:
        return _dense_shard(layer, slice(None), slice(lo, hi), bias=False)
    columns = layer.indices.long() & 0xFFFF
    inside = (columns >= lo) & (columns < hi)
    counts = inside.sum(dim=1)
    width = max(1, int(counts.max()))
    order = torch.sort((~inside).to(torch.int8), dim=1, stable=True).indices[:, :width]   # kept first, in order
    kept = inside.gather(1, order)
    values = torch.where(kept, layer.values.detach().gather(1, order), 0)
    shifted = torch.where(kept, columns.gather(1, order) - lo, hi - lo)
    return _with_copies_of(layer, SparseLinear.from_rows(values, shifted, hi - lo, None))


def _with_copies_of(layer, shard):
    """``shard`` keeping the inference copies ``layer`` lets its inference keep."""
    shard.inference_copies = layer.inference_copies
    return shard


class RowParallel(nn.Module):
    """A row-parallel shard: ``all_reduce(shard(x_local)) + bias`` (``x_local``: this rank's columns of ``x``)."""

    def __init__(self, layer, rank: int, world: int, group=None):
        super().__init__()
        self.shard, self.group = shard_rows(layer, rank, world), group
        self.bias = None if layer.bias is None else nn.Parameter(layer.bias.detach().clone())
        #: The shard's padded entries over its share of the stored ones (rows padded to the longest; 0 dense).
        self.padding = 0.0
        if isinstance(layer, SparseLinear):
            stored = int(((layer.indices.long() & 0xFFFF) < layer.in_features).sum())
            self.padding = self.shard.values.numel() * world / max(stored, 1) - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.shard(x)
        dist.all_reduce(y, group=self.group)
        return y if self.bias is None else y + self.bias


def tensor_parallel_(model: nn.Module, rank: int, world: int, group=None) -> nn.Module:
    """Shard every decoder block of ``model`` (a :class:`~sparsekit.torch.decoder.Decoder`, sparsified or
    dense) in place for rank ``rank`` of ``world``: its heads and its share of each linear layer."""
    for blk in model.blocks:
        if blk.heads % world:
            raise ValueError(f"model: {blk.heads} attention heads do not split over {world} ranks")
        for name in ("q", "k", "v", "gate", "up", "o", "down"):
            if not isinstance(getattr(blk, name), (SparseLinear, nn.Linear)):
                raise TypeError(f"model: block layer {name!r} is {type(getattr(blk, name)).__name__}, not a "
                                f"SparseLinear or nn.Linear (sharded already?)")
        for name in ("q", "k", "v", "gate", "up"):
            setattr(blk, name, shard_columns(getattr(blk, name), rank, world))
        for name in ("o", "down"):
            setattr(blk, name, RowParallel(getattr(blk, name), rank, world, group))
        blk.heads //= world
    return model
