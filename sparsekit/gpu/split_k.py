"""Split K: the K range of an output tile shared by several blocks, their float32 partials summed in a fixed
order by the last block to finish, so results are bit-identical from run to run.

* :func:`split_range` (device): a block's near-equal part of a range;
* :func:`split_ticket` (device): the hand-over: partials made visible, a ticket drawn per output tile, the
  last block told (and the ticket reset for the next launch);
* :func:`split_buffers` (host): the grid with the split as its z size, and the partial and ticket buffers,
  made once and kept with the prepared matrix.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from sparsekit.gpu.inline import inlined

__all__ = ["split_range", "split_ticket", "split_buffers"]


@inlined
def split_range(count, split, nsplit):
    """``(lo, hi)``: the ``split``-th of ``nsplit`` near-equal parts of ``range(count)`` (none empty
    when ``nsplit <= count``; the ``max`` calls only clamp to the valid ranges). Kernels index from
    views starting at ``lo`` rather than with ``lo + i``: the compiler cannot prove ``lo + i >= 0``
    and would add Python's negative-index wraparound to every load (the direct kernel ran 251.6 us
    instead of 178.6 us at 1024^3 60% on the H100 that way)."""
    count = max(count, 0)
    nsplit = max(nsplit, 1)
    split = max(split, 0)
    return split * count // nsplit, (split + 1) * count // nsplit


@inlined
def split_ticket(ticket, nsplit, tile, sh_last):
    """The hand-over of a K-split launch (the K range split over ``nsplit`` blocks, ``blockIdx.z`` =
    split, all of one output tile number ``tile``), called by every thread of a block after it wrote
    its partial sums to ``part[blockIdx.z]``: the block makes them visible GPU-wide
    (``threadfence``) and takes a ticket (``atomic.add`` on ``ticket[tile]``). True in every thread
    of the block that drew the last ticket, which resets the ticket to 0 for the next launch and then
    sums the partials: each partial is read once, by that block, after its ticket, so no stale L1
    line of it can exist. ``sh_last``: a 1-element shared array (any integer type)."""
    cuda.threadfence()                                                   # partials visible before the ticket
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        last = cuda.atomic.add(ticket, tile, 1) == nsplit - 1
        if last:
            ticket[tile] = 0                                             # every block of the tile has drawn
        sh_last[0] = 1 if last else 0
    cuda.syncthreads()
    if sh_last[0] == 1:
        cuda.threadfence()
        return True
    return False


def split_buffers(dell, grid, n, splits, count):
    """``(grid, part, ticket, nsplit)`` for a kernel whose K range (``count`` chunks or slots) is
    split over ``nsplit = min(splits, count)`` blocks per output tile (at least 1): the grid gains
    ``nsplit`` as its z size; ``part`` is the ``nsplit x M x N`` float32 partial buffer and
    ``ticket`` one zeroed int32 counter per output tile, both made on first use and kept with
    ``dell`` (each launch leaves the tickets zeroed and rewrites the partials it reads, so launches
    sharing ``dell`` must be on one stream; allocating ``part`` per launch made 10-20% of an H100 run's
    repeats wait on the allocator). Without a split, 1-element stand-ins."""
    nsplit = max(1, min(splits, count))
    if nsplit == 1:
        part, ticket = dell.cached("no_split", lambda: (np.zeros((1, 1, 1), np.float32), np.zeros(1, np.int32)))
    else:
        tiles, m = grid[0] * grid[1], dell.shape[0]
        part = dell.cached(("split_part", nsplit, n), lambda: np.empty((nsplit, m, n), np.float32))
        ticket = dell.cached(("split_tickets", tiles), lambda: np.zeros(tiles, np.int32))
    return (grid[0], grid[1], nsplit), part, ticket, nsplit
