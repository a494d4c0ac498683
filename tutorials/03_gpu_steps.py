"""Tutorial 3: SpMM on the GPU, one change at a time.

What you will learn
-------------------
Seven kernels of ``sparsekit/gpu/spmm_lessons.py``, each changing one thing:

1. a thread per output element (warps span rows: divergent, uncoalesced);
2. a warp per row (lanes on columns: coalesced, no divergence);
3. a tile of ``B`` in shared memory, reused by the block's rows;
4. Sputnik's row swizzle (rows by decreasing length);
5. the slides' thread-group Algorithm 3 (K-lists, ACC, atomic adds);
6. blocks of variable height holding equal nonzeros (the slides' second way);
7. several warps per row, the row's nonzeros staged in shared memory (long rows).

Each is checked against ``sparsekit/reference/spmm.py``. On a GPU each is timed
(device time, :func:`sparsekit.timing.measure`) against cuSPARSE when PyTorch
is present; without one the kernels run on the CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``) at toy size, which checks them but times nothing,
and the tutorial prints what the lockstep model predicts instead.

Run it: ``python tutorials/03_gpu_steps.py`` (``--quick`` for toy sizes).
"""
from __future__ import annotations

import os
import sys

import numpy as np


def main(quick: bool = False) -> dict:
    from sparsekit.bench.spmm import Checker, suite_matrix
    from sparsekit.gpu import spmm_lessons as les
    from sparsekit import balance as bal

    on_gpu = os.environ.get("NUMBA_ENABLE_CUDASIM") != "1"
    m, k, n = (40, 48, 36) if quick or not on_gpu else (512, 512, 256)
    csr, b, a = suite_matrix(m, k, n, 0.9)

    # Step 0. What the mapping costs before any timing: lanes of a warp in lockstep.
    tpr = bal.mapping_imbalance(csr, rows_per_warp=32, warps_per_block=4)
    swz = bal.mapping_imbalance(csr, rows_per_warp=32, warps_per_block=4, order=bal.row_swizzle(csr))
    print(f"A: {m}x{k}, 90% sparse; a thread per row keeps {100 * tpr['warp_efficiency']:.0f}% of lanes busy "
          f"({100 * swz['warp_efficiency']:.0f}% with rows swizzled)")

    # Steps 1-7: run each lesson, check it, time it on a GPU.
    d = les.prepare(csr)
    correct = Checker(a, b)
    results = {}
    for name, fn, what in les.LESSONS:
        ok = correct(fn(d, b))
        assert ok, name
        line = f"  {name:24s} correct  ({what})"
        if on_gpu:
            from numba import cuda

            from sparsekit.timing import measure
            b_dev = cuda.to_device(b)
            t = measure(lambda: fn(d, b_dev), repeat=10).median_s
            results[name] = t
            line = f"  {name:24s} {t * 1e6:8.1f} us  ({what})"
        else:
            results[name] = ok
        print(line)
    return results


if __name__ == "__main__":
    from sparsekit.backend import choose_backend

    choose_backend()      # the simulator when no GPU answers (before numba.cuda is imported)
    main(quick="--quick" in sys.argv)
