"""Load balance of SpMM work: row lengths, mappings of rows to warps and blocks, and fixes.

The course slides (../shared/papers/spmm-course-slides.txt, "Load Balancing",
"Load Balancing among blocks") observe that at 90% overall sparsity single
rows range from 86.1% to 93.6% sparse, so the rows handed to one warp or
block carry different amounts of work. This module measures that and
implements the remedies the slides and Sputnik use:

* :func:`row_stats` and :func:`heavy_row_share`: the distribution of row lengths;
* :func:`mapping_imbalance`: for a mapping (``rows_per_warp`` rows per warp,
  ``warps_per_block`` warps per block, rows taken in a given ``order``) the
  lockstep efficiency inside warps and the spread of work between blocks;
* :func:`row_swizzle`: Sputnik's row swizzle (Gale et al. 2020, section 5.2):
  process rows in decreasing order of length, so rows of similar length share
  a warp and the heaviest rows start first;
* :func:`split_k` (the slides' *first way*: every block gets an equal share of
  the nonzeros of the ``(M-tile, k)`` work list, so a block may cross output
  tiles) and :func:`split_m` (the *second way*: variable-height M-tiles holding
  about equal nonzeros, one output tile per block), both beside
  :func:`equal_m_tiles`, the unbalanced baseline. Each returns a
  :class:`BlockPlan` whose ``nnz`` per block gives the imbalance.

Everything takes a CSR matrix (``sparsekit.formats.CSR`` or any object with
``indptr`` and ``shape``) and only reads its structure.

>>> import numpy as np
>>> from sparsekit.formats import CSR
>>> a = CSR.from_dense(np.array([[1., 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0]]))
>>> row_lengths(a).tolist()
[4, 1, 0, 2]
>>> row_swizzle(a).tolist()
[0, 3, 1, 2]
>>> round(heavy_row_share(a, 0.25), 3)
0.571
>>> split_m(a, 2).nnz.tolist()
[4, 3]
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from sparsekit.checks import check_array, check_int

__all__ = ["row_lengths", "row_stats", "heavy_row_share", "mapping_imbalance", "row_swizzle",
           "BlockPlan", "equal_m_tiles", "split_m", "split_k", "WARP"]

#: Threads per warp.
WARP = 32


def _indptr(csr) -> np.ndarray:
    if not hasattr(csr, "indptr") or not hasattr(csr, "shape"):
        raise TypeError(f"csr: expected a CSR matrix (indptr, shape), got {type(csr).__name__}")
    return check_array(csr.indptr, "csr.indptr", ndim=1, dtypes=None, shape=(int(csr.shape[0]) + 1,))


def row_lengths(csr) -> np.ndarray:
    """Nonzeros per row (int64)."""
    return np.diff(_indptr(csr)).astype(np.int64)


def row_stats(csr) -> dict:
    """Row-length statistics: mean, std, coefficient of variation, min, max, max/mean,
    empty rows, and the per-row sparsity range (the slides' "86.1% to 93.6%")."""
    lengths = row_lengths(csr)
    m, k = int(csr.shape[0]), int(csr.shape[1])
    mean = float(lengths.mean()) if m else 0.0
    return {
        "rows": m, "cols": k, "nnz": int(lengths.sum()),
        "mean": mean, "std": float(lengths.std()) if m else 0.0,
        "cv": float(lengths.std() / mean) if mean else 0.0,
        "min": int(lengths.min()) if m else 0, "max": int(lengths.max()) if m else 0,
        "max_over_mean": float(lengths.max() / mean) if mean else 0.0,
        "empty_rows": int(np.count_nonzero(lengths == 0)),
        "row_sparsity_min": float(1 - lengths.max() / k) if m and k else 0.0,
        "row_sparsity_max": float(1 - lengths.min() / k) if m and k else 0.0,
    }


def heavy_row_share(csr, fraction: float = 0.1) -> float:
    """Share of all nonzeros held by the heaviest ``fraction`` of rows (at least one row).

    Rows of equal length give ``fraction``; all the work in one row gives 1.
    """
    if not (0.0 < float(fraction) <= 1.0):
        raise ValueError(f"fraction: must lie in (0, 1], got {fraction!r}")
    lengths = np.sort(row_lengths(csr))[::-1]
    total = lengths.sum()
    if total == 0:
        return 0.0
    top = max(1, int(round(fraction * lengths.size)))
    return float(lengths[:top].sum() / total)


def row_swizzle(csr) -> np.ndarray:
    """Sputnik's row swizzle: row ids in decreasing order of length (ties by row id).

    A kernel processes position ``t`` of this order where it would have processed
    row ``t``: neighbouring warps then get rows of similar length (little
    lockstep waste) and the longest rows are scheduled first (short tail).
    """
    lengths = row_lengths(csr)
    return np.argsort(-lengths, kind="stable").astype(np.int32)


def mapping_imbalance(csr, *, rows_per_warp: int, warps_per_block: int, order=None,
                      slots: int | None = None) -> dict:
    """Work imbalance of a row-to-thread mapping.

    Rows are taken in ``order`` (default: natural; pass :func:`row_swizzle` to
    see its effect), ``rows_per_warp`` consecutive rows per warp (32: a thread
    per row; 1: a warp per row) and ``warps_per_block`` warps per block.

    A warp runs its rows in lockstep, so it costs ``rows_per_warp x`` its
    longest row in lane-steps (a warp per row: the row's length). Returns

    ``warp_efficiency``  nonzeros / lane-steps issued, in (0, 1] (1: no waste);
    ``block_imbalance``  max over blocks of block cost / mean block cost, where a
                         block costs the lane-steps its warps issue (1: even);
    ``blocks``           number of blocks;
    ``makespan``         (with ``slots``) the finishing time of a greedy scheduler
                         that starts the blocks in launch order on ``slots``
                         concurrent block slots (SMs x resident blocks), divided by
                         the ideal ``nnz / slots`` (1: no lockstep waste and no
                         tail). Sorting rows (the swizzle) cuts the waste inside
                         warps but groups the heaviest rows into the first blocks,
                         so ``block_imbalance`` rises; the makespan weighs both.
    """
    rpw = check_int(rows_per_warp, "rows_per_warp", minimum=1)
    if slots is not None:
        slots = check_int(slots, "slots", minimum=1)
    wpb = check_int(warps_per_block, "warps_per_block", minimum=1)
    lengths = row_lengths(csr)
    if order is not None:
        order = check_array(np.asarray(order), "order", ndim=1, dtypes=None, shape=(lengths.size,))
        if not np.array_equal(np.sort(order), np.arange(lengths.size)):
            raise ValueError("order: must be a permutation of the row ids 0..M-1")
        lengths = lengths[order]
    m = lengths.size
    if m == 0:
        return {"warp_efficiency": 1.0, "block_imbalance": 1.0, "blocks": 0,
                **({"makespan": 1.0} if slots else {})}
    warps = -(-m // rpw)
    padded = np.zeros(warps * rpw, dtype=np.int64)
    padded[:m] = lengths
    warp_steps = padded.reshape(warps, rpw).max(axis=1)          # lockstep: the longest lane
    issued = warp_steps * rpw
    blocks = -(-warps // wpb)
    block_cost = np.zeros(blocks * wpb, dtype=np.int64)
    block_cost[:warps] = issued                                   # lane-steps, comparable with nnz
    block_cost = block_cost.reshape(blocks, wpb).sum(axis=1)
    nnz = int(lengths.sum())
    mean = block_cost.mean()
    out = {"warp_efficiency": float(nnz / issued.sum()) if issued.sum() else 1.0,
           "block_imbalance": float(block_cost.max() / mean) if mean else 1.0,
           "blocks": int(blocks)}
    if slots is not None:
        out["makespan"] = _makespan(block_cost, slots, nnz)
    return out


def _makespan(costs: np.ndarray, slots: int, nnz: int) -> float:
    """Greedy list scheduling in launch order on ``slots`` slots, over the ideal ``nnz / slots``."""
    if nnz == 0:
        return 1.0
    free = [0.0] * min(slots, costs.size)
    heapq.heapify(free)
    end = 0.0
    for c in costs:
        t = heapq.heappop(free) + float(c)
        end = max(end, t)
        heapq.heappush(free, t)
    return end / (nnz / slots)


@dataclass(frozen=True)
class BlockPlan:
    """How a scheme splits SpMM work over thread blocks.

    Block ``b`` takes the work items ``start[b] .. stop[b]`` of the scheme's work
    list and holds ``nnz[b]`` nonzeros; ``tiles[b]`` is the number of output
    M-tiles it writes (more than one needs the "complicated logic" the slides
    warn of, or atomics).
    """

    scheme: str
    start: np.ndarray
    stop: np.ndarray
    nnz: np.ndarray
    tiles: np.ndarray

    @property
    def imbalance(self) -> float:
        """Max over blocks of nonzeros / mean (1: perfectly even)."""
        mean = self.nnz.mean() if self.nnz.size else 0.0
        return float(self.nnz.max() / mean) if mean else 1.0


def equal_m_tiles(csr, tile_m: int) -> BlockPlan:
    """The unbalanced baseline: block ``b`` takes rows ``b*tile_m .. (b+1)*tile_m`` and all of K."""
    tm = check_int(tile_m, "tile_m", minimum=1)
    indptr = _indptr(csr).astype(np.int64)
    m = int(csr.shape[0])
    start = np.arange(0, m, tm, dtype=np.int64)
    stop = np.minimum(start + tm, m)
    return BlockPlan("equal M-tiles", start, stop, indptr[stop] - indptr[start], np.ones(start.size, np.int64))


def split_m(csr, blocks: int) -> BlockPlan:
    """The slides' *second way*: variable-height M-tiles holding about ``nnz / blocks`` each.

    Row boundaries are placed where the running nonzero count crosses
    ``b * nnz / blocks``; rows are indivisible, so one long row still
    unbalances its block. Each block writes exactly one output tile.
    """
    nb = check_int(blocks, "blocks", minimum=1)
    indptr = _indptr(csr).astype(np.int64)
    m = int(csr.shape[0])
    nnz = int(indptr[-1])
    targets = (np.arange(1, nb) * nnz) / nb
    cuts = np.searchsorted(indptr, targets, side="left")         # first row boundary at or past the target
    bounds = np.unique(np.concatenate(([0], np.clip(cuts, 0, m), [m])))
    start, stop = bounds[:-1], bounds[1:]
    return BlockPlan("variable M-tiles, equal nnz", start, stop, indptr[stop] - indptr[start],
                     np.ones(start.size, np.int64))


def split_k(csr, tile_m: int, blocks: int) -> BlockPlan:
    """The slides' *first way*: equal M-tiles, and each block a variable share of K.

    The work list is every nonzero ordered by (M-tile, column k, row): the
    slides' table of ``K0 M[0:32], K1 M[0:32], ...``. It is cut into ``blocks``
    contiguous pieces of (nearly) equal nonzero count; a piece spans the K
    range it needs and may cross from one M-tile into the next (``tiles`` > 1),
    adding its partial sums atomically as in Algorithm 3.
    ``start``/``stop`` index the work list.
    """
    tm = check_int(tile_m, "tile_m", minimum=1)
    nb = check_int(blocks, "blocks", minimum=1)
    lengths = row_lengths(csr)
    nnz = int(lengths.sum())
    rows = np.repeat(np.arange(lengths.size), lengths)
    tile_of = rows // tm                                           # work list sorted by tile (then k)
    bounds = (np.arange(nb + 1) * nnz) // nb
    start, stop = bounds[:-1], bounds[1:]
    tiles = np.array([np.unique(tile_of[s:e]).size for s, e in zip(start, stop)], dtype=np.int64)
    return BlockPlan("equal M-tiles, variable K share", start.astype(np.int64), stop.astype(np.int64),
                     (stop - start).astype(np.int64), tiles)
