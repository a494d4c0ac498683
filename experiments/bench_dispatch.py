"""Host overhead of a TiledCSL layer in PyTorch against F.linear, as a script on a GPU::

    python experiments/bench_dispatch.py

The same measurement as ``sparsekit bench dispatch-tiled`` (:mod:`sparsekit.commands.dispatch`): for a prepared
4096x4096 weight at 80% uniform sparsity, N = 1 and 16, float16 and bfloat16, device time, wall time per call
back to back from torch tensors and their difference, for ``TiledSparseLinear`` and dense ``F.linear``.
"""
from __future__ import annotations

from sparsekit.commands.dispatch import run, table

if __name__ == "__main__":
    print(table(run()))
