"""Tutorial 2: tiling, threads, and an autotuner.

What you will learn
-------------------
* the slides' "control loops": split N and K into tiles of B in {16, 32, 64,
  128} so a ``tile_k x tile_n`` block of ``B`` stays in cache while every row
  of a panel uses it (``sparsekit.cpu.spmm.spmm_csr_tiled``);
* an exhaustive grid search over the tile sizes (the slides' autotuning);
* threads (``parallel=True``: Numba's ``prange`` over row panels) and how this
  machine's cores respond;
* where we stand against ``scipy.sparse`` and dense BLAS.

Run it: ``python tutorials/02_tiling.py`` (``--quick`` for toy sizes).
"""
from __future__ import annotations

import sys

import numpy as np


def main(quick: bool = False) -> dict:
    import numba

    from sparsekit.cpu import spmm as cpu
    from sparsekit.bench.spmm import suite_matrix, tune_tiles, wall_time
    from sparsekit.reference.spmm import spmm_csr

    m, k, n = (128, 128, 64) if quick else (1024, 1024, 256)
    csr, b, a = suite_matrix(m, k, n, 0.9)
    want = spmm_csr(csr, b)

    # Step 1. Tiling only reorders the loops around each sum: the result equals row-wise bit for bit.
    tiled = cpu.spmm_csr_tiled(csr, b, tile_n=32, tile_k=64)
    assert np.array_equal(tiled, cpu.spmm_csr(csr, b))
    assert np.allclose(tiled, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

    # Step 2. Grid search over (tile_n, tile_k) in {16, 32, 64, 128}^2.
    (tn, tk), grid = tune_tiles(csr, b, parallel=False, repeat=2)
    print(f"Step 2: {m}x{k} (90%) x {n}: best tiles tile_n={tn}, tile_k={tk}")
    for r in sorted(grid, key=lambda r: r["ms"])[:4]:
        print(f"  tile_n={r['tile_n']:3d} tile_k={r['tile_k']:3d}  {r['ms']:.3f} ms")

    # Step 3. Serial vs parallel, against the naive order, scipy and dense BLAS.
    sp = csr.to_scipy()
    runs = {
        "naive (inner, i-j-k)": lambda: cpu.spmm_csr(csr, b, "inner"),
        "row-wise serial": lambda: cpu.spmm_csr(csr, b),
        "row-wise parallel": lambda: cpu.spmm_csr(csr, b, parallel=True),
        f"tiled {tn}x{tk} serial": lambda: cpu.spmm_csr_tiled(csr, b, tile_n=tn, tile_k=tk),
        f"tiled {tn}x{tk} parallel": lambda: cpu.spmm_csr_tiled(csr, b, tile_n=tn, tile_k=tk, parallel=True),
        "scipy.sparse": lambda: sp @ b,
        "dense BLAS": lambda: a @ b,
    }
    times = {name: wall_time(fn, 3)[0] for name, fn in runs.items()}
    print(f"\nStep 3: times (threads = {numba.get_num_threads()})")
    naive = times["naive (inner, i-j-k)"]
    for name, t in times.items():
        print(f"  {name:28s} {t * 1e3:8.3f} ms   {naive / t:5.1f}x vs naive")
    return times


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
